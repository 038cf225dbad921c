"""One attempt of a chat completion over HTTP, the part every provider shares.

Streaming (SSE) and plain. Each phase of an attempt has its own deadline, never later than
the attempt's: the first token (streams) and every next token (the stall guard). Only
content tokens move the stall deadline, so keep-alive comments cannot hide a stalled
generation. Every read is bounded: the body by ``max_response_bytes``, a stream line by
``max_line_bytes``, an error body by ``MAX_ERROR_BODY``; past a cap the attempt ends as
``response_too_large`` without reading further.

A provider (``openai``, ``anthropic``) subclasses ``HttpChatProvider`` with what differs:
the request's body and headers, how a plain body and a stream's lines are read, and how
an error body is classified.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import httpx
import orjson

from deepagents.contract.toolcalls import ToolCall
from deepagents.modelcall.providers.base import AttemptSpec, Completion
from deepagents.modelcall.retrying import ErrorKind, ProviderError, classify, parse_retry_after

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


class Clock:
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


async def within(step: Awaitable[T], deadline: float, spec: AttemptSpec, phase: str) -> T:
    try:
        async with asyncio.timeout_at(min(deadline, spec.deadline)):
            return await step
    except TimeoutError:
        name = "attempt_timeout" if spec.deadline <= deadline else phase
        raise ProviderError(ErrorKind.TRANSIENT, name) from None


@dataclass(frozen=True, slots=True)
class Parsed:
    """What a provider read from an answer, before timing is added."""

    text: str
    tool_calls: tuple[ToolCall, ...]
    tokens_in: int | None
    tokens_out: int | None
    model: str | None
    finish_reason: str | None
    vectors: tuple[tuple[float, ...], ...] = ()


class StreamParser(Protocol):
    """Reads a stream line by line. ``moved``: the last line carried generated tokens
    (it moves the stall guard); ``tokens``: how many so far (billed if the stream breaks)."""

    moved: bool
    done: bool
    tokens: int

    def feed(self, line: str) -> bool:
        """Take one line; True at the end of the answer."""
        ...

    def parsed(self, spec: AttemptSpec) -> Parsed: ...


def usage_int(value: Any) -> int | None:
    """A usage count as the server gave it, if it is one (a hostile server may send text)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def bad_response(status: int) -> ProviderError:
    return ProviderError(ErrorKind.TRANSIENT, "bad_response", status=status)


class HttpChatProvider:
    """The attempt itself; subclasses say what is sent and how answers are read."""

    path = ""

    def payload(self, spec: AttemptSpec) -> dict[str, Any]:
        raise NotImplementedError

    def headers(self, spec: AttemptSpec) -> dict[str, str]:
        raise NotImplementedError

    def parse_plain(self, body: Any, spec: AttemptSpec) -> Parsed:
        """The fields of a decoded plain body; raise a ``TypeError``/``KeyError``/... on a
        body of the wrong shape (read as ``bad_response``)."""
        raise NotImplementedError

    def stream_parser(self) -> StreamParser:
        raise NotImplementedError

    def error_kind(self, status: int, body: Any) -> ErrorKind:
        return classify(status, body)

    async def complete(self, client: httpx.AsyncClient, spec: AttemptSpec) -> Completion:
        clock = Clock(asyncio.get_running_loop())
        try:
            return await self._exchange(client, spec, clock)
        except httpx.HTTPError as exc:
            error = map_httpx_error(exc)
            error.timing = clock.timing()
            raise error from None
        except ProviderError as error:
            error.timing = clock.timing()
            raise

    def _request(self, client: httpx.AsyncClient, spec: AttemptSpec, clock: Clock) -> httpx.Request:
        # Reads are bounded by our phase deadlines, not by httpx's per-read timeout.
        timeout = httpx.Timeout(spec.connect_s, read=None)
        return client.build_request(
            "POST",
            spec.url,
            content=orjson.dumps(self.payload(spec)),
            headers={"content-type": "application/json", **self.headers(spec)},
            timeout=timeout,
            extensions={"trace": clock.trace},
        )

    async def _exchange(
        self, client: httpx.AsyncClient, spec: AttemptSpec, clock: Clock
    ) -> Completion:
        request = self._request(client, spec, clock)
        # A stream must start within first_token_s; a plain answer only arrives when the
        # whole generation is done, so only the attempt's own deadline bounds it.
        headers_by = clock.start + spec.first_token_s if spec.stream else spec.deadline
        response = await within(
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
            raw = await within(_read_capped(response, cap), spec.deadline, spec, "error_body")
            body = orjson.loads(raw)
        except (orjson.JSONDecodeError, httpx.HTTPError):
            pass
        except ProviderError as failed:
            if failed.kind is ErrorKind.RESPONSE_TOO_LARGE:
                raise
            # the body did not come in time: the status alone classifies the answer
        kind = self.error_kind(response.status_code, body)
        error = body.get("error") if isinstance(body, dict) else None
        code = str(error.get("code") or error.get("type") or "") if isinstance(error, dict) else ""
        return ProviderError(
            kind,
            code or f"http_{response.status_code}",
            status=response.status_code,
            retry_after_s=parse_retry_after(response.headers),
        )

    async def _read_plain(
        self, response: httpx.Response, spec: AttemptSpec, clock: Clock
    ) -> Completion:
        clock.first_token_ms = clock.since_start_ms()
        raw = await within(
            _read_capped(response, spec.max_response_bytes), spec.deadline, spec, "attempt_timeout"
        )
        try:
            parsed = self.parse_plain(orjson.loads(raw), spec)
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError):
            raise bad_response(response.status_code) from None
        return _completion(parsed, response, clock)

    async def _read_stream(
        self, response: httpx.Response, spec: AttemptSpec, clock: Clock
    ) -> Completion:
        state = self.stream_parser()
        lines = bounded_lines(response, spec.max_line_bytes, spec.max_response_bytes)
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
        await within(_drain(lines), spec.deadline, spec, "attempt_timeout")
        return _completion(state.parsed(spec), response, clock)


def _completion(parsed: Parsed, response: httpx.Response, clock: Clock) -> Completion:
    return Completion(
        text=parsed.text,
        tool_calls=parsed.tool_calls,
        tokens_in=parsed.tokens_in,
        tokens_out=parsed.tokens_out,
        model_version=response.headers.get("x-model-version") or parsed.model,
        status_code=response.status_code,
        connect_ms=clock.connect_ms,
        first_token_ms=clock.first_token_ms,
        total_ms=clock.since_start_ms(),
        finish_reason=parsed.finish_reason,
        vectors=parsed.vectors,
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


async def bounded_lines(
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


async def _drain(lines: AsyncIterator[str]) -> None:
    async for _ in lines:
        pass
