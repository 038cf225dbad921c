"""OpenAI-format embeddings (``POST {base_url}/embeddings``): one request for a batch.

The inputs travel as the attempt's messages (one user message each), so the gates size and
reserve them like any prompt. The answer must hold one vector of numbers per input, every
index once; anything else is ``bad_response``.
"""

from __future__ import annotations

from typing import Any

from deepagents.modelcall.providers.base import AttemptSpec
from deepagents.modelcall.providers.http import HttpChatProvider, Parsed, StreamParser, usage_int
from deepagents.modelcall.providers.openai import OpenAIProvider


class EmbeddingsProvider(HttpChatProvider):
    name = "openai-embeddings"
    path = "/embeddings"

    def payload(self, spec: AttemptSpec) -> dict[str, Any]:
        inputs = [str(message.get("content") or "") for message in spec.messages]
        return {**spec.extra, "model": spec.model_id, "input": inputs}

    def headers(self, spec: AttemptSpec) -> dict[str, str]:
        return OpenAIProvider().headers(spec)

    def parse_plain(self, body: Any, spec: AttemptSpec) -> Parsed:
        data = body["data"]
        if not isinstance(data, list) or len(data) != len(spec.messages):
            raise TypeError("not one embedding per input")
        vectors: dict[int, tuple[float, ...]] = {}
        for item in data:
            index, vector = item["index"], item["embedding"]
            if not isinstance(index, int) or index in vectors or not isinstance(vector, list):
                raise TypeError("an embedding without its own index")
            if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in vector):
                raise TypeError("an embedding of something other than numbers")
            vectors[index] = tuple(float(x) for x in vector)
        if sorted(vectors) != list(range(len(spec.messages))):
            raise KeyError("indexes do not match the inputs")
        usage = body.get("usage") or {}
        return Parsed(
            text="",
            tool_calls=(),
            tokens_in=usage_int(usage.get("prompt_tokens")),
            tokens_out=0,
            model=body.get("model"),
            finish_reason=None,
            vectors=tuple(vectors[i] for i in range(len(spec.messages))),
        )

    def stream_parser(self) -> StreamParser:
        raise TypeError("embeddings are never streamed")
