"""The Anthropic Messages API (``POST {base_url}/messages``), plain and streamed.

Messages go out translated from the OpenAI format (``anthropic_format``); answers come
back as text and ``tool_use`` blocks, checked like every tool call (``modelcall.toolcalls``).
Usage: ``input_tokens`` plus the cache's ``cache_creation_input_tokens`` and
``cache_read_input_tokens`` (all priced at ``price_in_per_1k``), ``output_tokens``.

Errors are ``{"type": "error", "error": {"type": ..., "message": ...}}``: 529
``overloaded_error`` and 500 ``api_error`` are transient, 429 ``rate_limit_error`` waits
for ``retry-after``, 401 ``authentication_error`` earns a key refresh, ``billing_error`` is
a spend limit, and a 400 ``invalid_request_error`` saying the prompt is too long is
``context_length``. A stream can fail after its 200 with an ``error`` event: transient.
"""

from __future__ import annotations

from typing import Any

import orjson

from deepagents.contract.toolcalls import ToolCall
from deepagents.modelcall.providers.anthropic_format import anthropic_request
from deepagents.modelcall.providers.base import AttemptSpec
from deepagents.modelcall.providers.http import HttpChatProvider, Parsed, usage_int
from deepagents.modelcall.retrying import ErrorKind, ProviderError, classify
from deepagents.modelcall.toolcalls import bad_tool_call, checked_call, checked_count

API_VERSION = "2023-06-01"
_CONTEXT_WORDS = ("prompt is too long", "context window", "context length")


class AnthropicProvider(HttpChatProvider):
    name = "anthropic"
    path = "/messages"

    def payload(self, spec: AttemptSpec) -> dict[str, Any]:
        return {
            **spec.extra,
            **anthropic_request(spec.messages, spec.tools),
            "model": spec.model_id,
            "max_tokens": spec.max_tokens,
            "stream": spec.stream,
        }

    def headers(self, spec: AttemptSpec) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION, "x-request-id": spec.request_id}
        if spec.api_key:
            headers["x-api-key"] = spec.api_key
        return headers

    def parse_plain(self, body: Any, spec: AttemptSpec) -> Parsed:
        content = body["content"]
        if not isinstance(content, list):
            raise TypeError("content is not a list of blocks")
        texts: list[str] = []
        uses: list[dict[str, Any]] = []
        for block in content:
            if block.get("type") == "text":
                texts.append(str(block.get("text", "")))
            elif block.get("type") == "tool_use":
                uses.append(block)
        checked_count(len(uses))
        calls = tuple(_plain_call(use, spec) for use in uses)
        usage = body.get("usage") or {}
        return Parsed(
            text="".join(texts),
            tool_calls=calls,
            tokens_in=_input_tokens(usage),
            tokens_out=usage_int(usage.get("output_tokens")),
            model=body.get("model"),
            finish_reason=body.get("stop_reason"),
        )

    def stream_parser(self) -> _StreamState:
        return _StreamState()

    def error_kind(self, status: int, body: Any) -> ErrorKind:
        error = body.get("error") if isinstance(body, dict) else None
        kind = error.get("type") if isinstance(error, dict) else None
        message = str(error.get("message", "")).lower() if isinstance(error, dict) else ""
        if kind == "billing_error":
            return ErrorKind.SPEND_LIMIT
        if status in (400, 413) and any(word in message for word in _CONTEXT_WORDS):
            return ErrorKind.CONTEXT_LENGTH
        return classify(status, body)


def _plain_call(use: dict[str, Any], spec: AttemptSpec) -> ToolCall:
    arguments = use.get("input")
    if not isinstance(arguments, dict):
        raise bad_tool_call("arguments are not a JSON object")
    return checked_call(
        use.get("id"), use.get("name"), arguments, spec.tools, spec.max_tool_call_bytes
    )


def _input_tokens(usage: dict[str, Any]) -> int | None:
    base = usage_int(usage.get("input_tokens"))
    if base is None:
        return None
    cached = (
        usage_int(usage.get("cache_creation_input_tokens")),
        usage_int(usage.get("cache_read_input_tokens")),
    )
    return base + sum(n for n in cached if n is not None)


class _Block:
    """A content block arriving in a stream: text, or a tool use with its JSON in pieces."""

    def __init__(self, start: dict[str, Any]) -> None:
        self.type = start.get("type")
        self.id = start.get("id")
        self.name = start.get("name")
        self.text: list[str] = [str(start.get("text") or "")]
        self.json: list[str] = []


class _StreamState:
    """The events of a Messages stream (``message_start`` ... ``message_stop``)."""

    def __init__(self) -> None:
        self.moved = False
        self.done = False
        self.tokens = 0
        self.blocks: dict[int, _Block] = {}
        self.usage: dict[str, Any] = {}
        self.model: str | None = None
        self.stop_reason: str | None = None

    def feed(self, line: str) -> bool:
        self.moved = False
        if not line.startswith("data:"):
            return False  # event names, blank separators, comments
        try:
            event = _decode(line[5:].strip())
        except ValueError:
            raise ProviderError(ErrorKind.TRANSIENT, "bad_stream_event") from None
        kind = event.get("type")
        if kind == "error":
            error = event.get("error")
            code = error.get("type") if isinstance(error, dict) else None
            raise ProviderError(ErrorKind.TRANSIENT, str(code or "stream_error"), status=200)
        if kind == "message_start":
            message = event.get("message") or {}
            self.model = message.get("model")
            self.usage.update(message.get("usage") or {})
        elif kind == "content_block_start":
            self._start(event)
        elif kind == "content_block_delta":
            self._delta(event)
        elif kind == "message_delta":
            self.stop_reason = (event.get("delta") or {}).get("stop_reason") or self.stop_reason
            self.usage.update(event.get("usage") or {})
        elif kind == "message_stop":
            self.done = True
            return True
        return False

    def _start(self, event: dict[str, Any]) -> None:
        index, block = event.get("index"), event.get("content_block")
        if not isinstance(index, int) or not isinstance(block, dict):
            raise ProviderError(ErrorKind.TRANSIENT, "bad_stream_event")
        if block.get("type") == "tool_use":
            checked_count(sum(1 for b in self.blocks.values() if b.type == "tool_use") + 1)
        self.blocks[index] = _Block(block)

    def _delta(self, event: dict[str, Any]) -> None:
        block = self.blocks.get(event.get("index"))  # type: ignore[arg-type]
        delta = event.get("delta")
        if block is None or not isinstance(delta, dict):
            raise ProviderError(ErrorKind.TRANSIENT, "bad_stream_event")
        if delta.get("type") == "text_delta":
            block.text.append(str(delta.get("text", "")))
        elif delta.get("type") == "input_json_delta":
            block.json.append(str(delta.get("partial_json", "")))
        else:
            return  # thinking, citations...: not part of the answer's text
        self.tokens += 1
        self.moved = True

    def parsed(self, spec: AttemptSpec) -> Parsed:
        ordered = [block for _, block in sorted(self.blocks.items())]
        calls = tuple(
            checked_call(b.id, b.name, "".join(b.json), spec.tools, spec.max_tool_call_bytes)
            for b in ordered
            if b.type == "tool_use"
        )
        return Parsed(
            text="".join("".join(b.text) for b in ordered if b.type == "text"),
            tool_calls=calls,
            tokens_in=_input_tokens(self.usage),
            tokens_out=usage_int(self.usage.get("output_tokens")),
            model=self.model,
            finish_reason=self.stop_reason,
        )


def _decode(data: str) -> dict[str, Any]:
    event = orjson.loads(data)
    if not isinstance(event, dict):
        raise ValueError("an event is not an object")
    return event
