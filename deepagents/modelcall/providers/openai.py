"""OpenAI-compatible chat completions (OpenAI, vLLM, Ollama, DashScope-compatible gateways).

Streaming (SSE) and plain. Each phase of an attempt has its own deadline, never later than
the attempt's: the first token (streams) and every next token (the stall guard). Only
content tokens move the stall deadline, so keep-alive comments cannot hide a stalled
generation. Every read is bounded: the body by ``max_response_bytes``, a stream line by
``max_line_bytes``, an error body by ``MAX_ERROR_BODY``; past a cap the attempt ends as
``response_too_large`` without reading further.

Tools offered go out as ``tools``; the tool calls of an answer (whole in a plain answer,
in pieces across stream deltas, assembled by their ``index``) are checked like gateway
input (``modelcall.toolcalls``) before they reach the caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

import httpx
import orjson

from deepagents.contract.toolcalls import ToolCall
from deepagents.modelcall.providers.base import AttemptSpec, Completion
from deepagents.modelcall.retrying import ErrorKind, ProviderError, classify, parse_retry_after
from deepagents.modelcall.toolcalls import bad_tool_call, checked_call, checked_count, openai_tools

T = TypeVar("T")

MAX_ERROR_BODY = 65_536

# Every exception httpx can raise, by what retrying can change (a test checks completeness).
_HTTPX_TRANSIENT: tuple[type[Exception], ...] = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
    httpx.ProxyError,
    httpx.DecodingError,
)
_HTTPX_INVALID: tuple[type[Exception], ...] = (
    httpx.LocalProtocolError,
    httpx.UnsupportedProtocol,
    httpx.TooManyRedirects,
    httpx.InvalidURL,
    httpx.CookieConflict,
    httpx.StreamError,
)


def map_httpx_error(exc: Exception) -> ProviderError:
    if isinstance(exc, httpx.HTTPStatusError):
        return ProviderError(
            classify(exc.response.status_code, None), "http_status", status=exc.response.status_code
        )
    if isinstance(exc, _HTTPX_TRANSIENT):
        return ProviderError(ErrorKind.TRANSIENT, type(exc).__name__)
    if isinstance(exc, _HTTPX_INVALID):
        return ProviderError(ErrorKind.INVALID, type(exc).__name__)
    if isinstance(exc, httpx.HTTPError):  # a class added by a future httpx: assume it may pass
        return ProviderError(ErrorKind.TRANSIENT, type(exc).__name__)
    raise TypeError(f"not an httpx error: {type(exc).__name__}")


class _Clock:
    """Attempt timing; also the httpx trace hook that sees the TCP connect (0 when reused)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.start = loop.time()
        self.connect_started: float | None = None
        self.connect_ms: float | None = None
        self.first_token_ms: float | None = None

    async def trace(self, event: str, info: dict[str, Any]) -> None:
        if event == "connection.connect_tcp.started":
            self.connect_started = self.loop.time()
        elif event == "connection.connect_tcp.complete" and self.connect_started is not None:
            self.connect_ms = (self.loop.time() - self.connect_started) * 1000

    def since_start_ms(self) -> float:
        return (self.loop.time() - self.start) * 1000

    def timing(self) -> dict[str, float | None]:
        return {
            "connect_ms": self.connect_ms,
            "first_token_ms": self.first_token_ms,
            "total_ms": self.since_start_ms(),
        }


async def _within(step: Awaitable[T], deadline: float, spec: AttemptSpec, phase: str) -> T:
    try:
        async with asyncio.timeout_at(min(deadline, spec.deadline)):
            return await step
    except TimeoutError:
        name = "attempt_timeout" if spec.deadline <= deadline else phase
        raise ProviderError(ErrorKind.TRANSIENT, name) from None


class OpenAIProvider:
    name = "openai"
    path = "/chat/completions"

    async def complete(self, client: httpx.AsyncClient, spec: AttemptSpec) -> Completion:
        clock = _Clock(asyncio.get_running_loop())
        try:
            return await self._exchange(client, spec, clock)
        except httpx.HTTPError as exc:
            error = map_httpx_error(exc)
            error.timing = clock.timing()
            raise error from None
        except ProviderError as error:
            error.timing = clock.timing()
            raise

    def _request(
        self, client: httpx.AsyncClient, spec: AttemptSpec, clock: _Clock
    ) -> httpx.Request:
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
        headers = {"content-type": "application/json", "x-request-id": spec.request_id}
        if spec.api_key:
            headers["authorization"] = f"Bearer {spec.api_key}"
        # Reads are bounded by our phase deadlines, not by httpx's per-read timeout.
        timeout = httpx.Timeout(spec.connect_s, read=None)
        return client.build_request(
            "POST",
            spec.url,
            content=orjson.dumps(payload),
            headers=headers,
            timeout=timeout,
            extensions={"trace": clock.trace},
        )

    async def _exchange(
        self, client: httpx.AsyncClient, spec: AttemptSpec, clock: _Clock
    ) -> Completion:
        request = self._request(client, spec, clock)
        # A stream must start within first_token_s; a plain answer only arrives when the
        # whole generation is done, so only the attempt's own deadline bounds it.
        headers_by = clock.start + spec.first_token_s if spec.stream else spec.deadline
        response = await _within(
            client.send(request, stream=True), headers_by, spec, "first_token_timeout"
        )
        try:
            if response.status_code >= 400:
                raise await self._error(response, spec)
            if spec.stream:
                return await self._read_stream(response, spec, clock)
            return await self._read_plain(response, spec, clock)
        finally:
            await response.aclose()

    async def _error(self, response: httpx.Response, spec: AttemptSpec) -> ProviderError:
        body: Any = None
        cap = min(MAX_ERROR_BODY, spec.max_response_bytes)
        try:
            raw = await _within(_read_capped(response, cap), spec.deadline, spec, "error_body")
            body = orjson.loads(raw)
        except (orjson.JSONDecodeError, httpx.HTTPError):
            pass
        except ProviderError as failed:
            if failed.kind is ErrorKind.RESPONSE_TOO_LARGE:
                raise
            # the body did not come in time: the status alone classifies the answer
        kind = classify(response.status_code, body)
        error = body.get("error") if isinstance(body, dict) else None
        code = str(error.get("code") or error.get("type") or "") if isinstance(error, dict) else ""
        return ProviderError(
            kind,
            code or f"http_{response.status_code}",
            status=response.status_code,
            retry_after_s=parse_retry_after(response.headers),
        )

    async def _read_plain(
        self, response: httpx.Response, spec: AttemptSpec, clock: _Clock
    ) -> Completion:
        clock.first_token_ms = clock.since_start_ms()
        raw = await _within(
            _read_capped(response, spec.max_response_bytes), spec.deadline, spec, "attempt_timeout"
        )
        try:
            body = orjson.loads(raw)
            message = body["choices"][0]["message"]
            text = message.get("content") or ""
            raw_calls = message.get("tool_calls") or []
            if not isinstance(text, str) or not isinstance(raw_calls, list):
                raise TypeError("content or tool_calls of the wrong type")
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError):
            raise ProviderError(
                ErrorKind.TRANSIENT, "bad_response", status=response.status_code
            ) from None
        usage = body.get("usage") or {}
        return Completion(
            text=text,
            tool_calls=_plain_calls(raw_calls, spec),
            tokens_in=usage.get("prompt_tokens"),
            tokens_out=usage.get("completion_tokens"),
            model_version=response.headers.get("x-model-version") or body.get("model"),
            status_code=response.status_code,
            connect_ms=clock.connect_ms,
            first_token_ms=clock.first_token_ms,
            total_ms=clock.since_start_ms(),
            finish_reason=body["choices"][0].get("finish_reason"),
        )

    async def _read_stream(
        self, response: httpx.Response, spec: AttemptSpec, clock: _Clock
    ) -> Completion:
        state = _StreamState()
        lines = _bounded_lines(response, spec.max_line_bytes, spec.max_response_bytes)
        # One timeout for the whole stream, moved forward by every token (cheaper than a
        # timeout per line): first token by first_token_s, then each next by per_token_s.
        phase = "first_token_timeout"
        loop = clock.loop
        try:
            async with asyncio.timeout_at(
                min(clock.start + spec.first_token_s, spec.deadline)
            ) as guard:
                async for line in lines:
                    if state.feed(line):
                        break
                    if state.moved:
                        if phase != "stall":
                            clock.first_token_ms, phase = clock.since_start_ms(), "stall"
                        guard.reschedule(min(loop.time() + spec.per_token_s, spec.deadline))
        except TimeoutError:
            when = guard.when()
            name = "attempt_timeout" if when is not None and when >= spec.deadline else phase
            error = ProviderError(ErrorKind.TRANSIENT, name)
            error.partial_tokens = state.tokens
            raise error from None
        except ProviderError as error:
            error.partial_tokens = state.tokens
            raise
        if not state.done:
            raise ProviderError(ErrorKind.TRANSIENT, "stream_truncated", status=200)
        # Read to the end of the body so the connection goes back to the pool.
        await _within(_drain(lines), spec.deadline, spec, "attempt_timeout")
        usage = state.usage or {}
        return Completion(
            text="".join(state.parts),
            tool_calls=state.tool_calls(spec),
            tokens_in=usage.get("prompt_tokens"),
            tokens_out=usage.get("completion_tokens"),
            model_version=response.headers.get("x-model-version") or state.model,
            status_code=response.status_code,
            connect_ms=clock.connect_ms,
            first_token_ms=clock.first_token_ms,
            total_ms=clock.since_start_ms(),
            finish_reason=state.finish_reason,
        )


def _too_large(response: httpx.Response) -> ProviderError:
    return ProviderError(
        ErrorKind.RESPONSE_TOO_LARGE, "response_too_large", status=response.status_code
    )


async def _read_capped(response: httpx.Response, cap: int) -> bytes:
    """The body, refused as soon as it (or its announced length) passes ``cap`` bytes."""
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > cap:
        raise _too_large(response)
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > cap:
            raise _too_large(response)
    return bytes(body)


async def _bounded_lines(
    response: httpx.Response, max_line: int, max_total: int
) -> AsyncIterator[str]:
    """The body's lines (ended by LF, CRLF or CR, as SSE allows), none longer than
    ``max_line``, all within ``max_total``: httpx's ``aiter_lines`` buffers a line of any
    length. A CRLF split between chunks gives an extra empty line, which SSE ignores."""
    pending = b""
    total = 0
    async for chunk in response.aiter_bytes():
        total += len(chunk)
        if total > max_total:
            raise _too_large(response)
        lines = (pending + chunk).splitlines(keepends=True)
        pending = lines.pop() if lines and not lines[-1].endswith((b"\n", b"\r")) else b""
        for line in lines:
            yield line.rstrip(b"\r\n").decode(errors="replace")
        if len(pending) > max_line:
            raise _too_large(response)
    if pending:
        yield pending.decode(errors="replace")


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


async def _drain(lines: AsyncIterator[str]) -> None:
    async for _ in lines:
        pass


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

    def tool_calls(self, spec: AttemptSpec) -> tuple[ToolCall, ...]:
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
