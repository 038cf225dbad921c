"""OpenAI-compatible chat completions (OpenAI, vLLM, Ollama, DashScope-compatible gateways).

Tools offered go out as ``tools``; the tool calls of an answer (whole in a plain answer,
in pieces across stream deltas, assembled by their ``index``) are checked like gateway
input (``modelcall.toolcalls``) before they reach the caller.
"""

from __future__ import annotations

from typing import Any

import orjson

from deepagents.contract.toolcalls import ToolCall
from deepagents.modelcall.providers.base import AttemptSpec
from deepagents.modelcall.providers.http import HttpChatProvider, Parsed, usage_int
from deepagents.modelcall.retrying import ErrorKind, ProviderError
from deepagents.modelcall.toolcalls import bad_tool_call, checked_call, checked_count, openai_tools


class OpenAIProvider(HttpChatProvider):
    name = "openai"
    path = "/chat/completions"

    def payload(self, spec: AttemptSpec) -> dict[str, Any]:
        payload: dict[str, Any] = {
            **spec.extra,
            "model": spec.model_id,
            "messages": list(spec.messages),
            "max_tokens": spec.max_tokens,
            "stream": spec.stream,
        }
        if spec.stream:
            payload["stream_options"] = {"include_usage": True}
        if spec.tools:
            payload["tools"] = openai_tools(spec.tools)
        return payload

    def headers(self, spec: AttemptSpec) -> dict[str, str]:
        headers = {"x-request-id": spec.request_id}
        if spec.api_key:
            headers["authorization"] = f"Bearer {spec.api_key}"
        return headers

    def parse_plain(self, body: Any, spec: AttemptSpec) -> Parsed:
        choice = body["choices"][0]
        message = choice["message"]
        text = message.get("content") or ""
        raw_calls = message.get("tool_calls") or []
        if not isinstance(text, str) or not isinstance(raw_calls, list):
            raise TypeError("content or tool_calls of the wrong type")
        usage = body.get("usage") or {}
        return Parsed(
            text=text,
            tool_calls=_plain_calls(raw_calls, spec),
            tokens_in=usage_int(usage.get("prompt_tokens")),
            tokens_out=usage_int(usage.get("completion_tokens")),
            model=body.get("model"),
            finish_reason=choice.get("finish_reason"),
        )

    def stream_parser(self) -> _StreamState:
        return _StreamState()


def _plain_calls(raw_calls: list[Any], spec: AttemptSpec) -> tuple[ToolCall, ...]:
    checked_count(len(raw_calls))
    calls = []
    for raw in raw_calls:
        function = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(function, dict):
            raise bad_tool_call("a call has no function")
        arguments = function.get("arguments")
        if arguments is not None and not isinstance(arguments, str):
            raise bad_tool_call("arguments are not JSON text")
        calls.append(
            checked_call(
                raw.get("id"), function.get("name"), arguments, spec.tools, spec.max_tool_call_bytes
            )
        )
    return tuple(calls)


class _PartialCall:
    """A tool call arriving in stream deltas: id and name once, arguments in pieces."""

    def __init__(self) -> None:
        self.id: Any = None
        self.name: Any = None
        self.arguments: list[str] = []
        self.size = 0


class _StreamState:
    """Accumulates SSE ``data:`` events of a chat-completions stream."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.tokens = 0
        self.moved = False  # the last line carried content
        self.done = False
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None
        self.finish_reason: str | None = None
        self.calls: dict[int, _PartialCall] = {}

    def parsed(self, spec: AttemptSpec) -> Parsed:
        usage = self.usage or {}
        return Parsed(
            text="".join(self.parts),
            tool_calls=self._tool_calls(spec),
            tokens_in=usage_int(usage.get("prompt_tokens")),
            tokens_out=usage_int(usage.get("completion_tokens")),
            model=self.model,
            finish_reason=self.finish_reason,
        )

    def _tool_calls(self, spec: AttemptSpec) -> tuple[ToolCall, ...]:
        """The assembled calls, in index order, each checked whole."""
        return tuple(
            checked_call(
                part.id, part.name, "".join(part.arguments), spec.tools, spec.max_tool_call_bytes
            )
            for _, part in sorted(self.calls.items())
        )

    def _feed_calls(self, deltas: Any) -> None:
        if not isinstance(deltas, list):
            raise bad_tool_call("tool_calls delta is not a list")
        for delta in deltas:
            index = delta.get("index") if isinstance(delta, dict) else None
            if not isinstance(index, int) or isinstance(index, bool):
                raise bad_tool_call("a tool_calls delta has no index")
            part = self.calls.get(index)
            if part is None:
                checked_count(len(self.calls) + 1)
                part = self.calls[index] = _PartialCall()
            part.id = delta.get("id") or part.id
            function = delta.get("function") or {}
            if not isinstance(function, dict):
                raise bad_tool_call("a tool_calls delta has no function")
            part.name = function.get("name") or part.name
            piece = function.get("arguments")
            if piece:
                if not isinstance(piece, str):
                    raise bad_tool_call("arguments are not JSON text")
                part.arguments.append(piece)
            self.tokens += 1
            self.moved = True  # argument tokens are generation: they move the stall guard

    def feed(self, line: str) -> bool:
        """Take one line; True at ``[DONE]``."""
        self.moved = False
        if not line.startswith("data:"):
            return False  # blank separators, comments, event names
        data = line[5:].strip()
        if data == "[DONE]":
            self.done = True
            return True
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise ProviderError(ErrorKind.TRANSIENT, "bad_stream_event") from None
        if not isinstance(event, dict) or "error" in event:
            raise ProviderError(ErrorKind.TRANSIENT, "stream_error")
        self.model = event.get("model") or self.model
        self.usage = event.get("usage") or self.usage
        for choice in event.get("choices") or ():
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if content:
                self.parts.append(content)
                self.tokens += 1
                self.moved = True
            if delta.get("tool_calls"):
                self._feed_calls(delta["tool_calls"])
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
        return False
