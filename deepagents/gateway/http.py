"""uvicorn's HTTP protocol (httptools) with a deadline and a size cap for the request line
and headers.

uvicorn closes an idle keep-alive connection, but not one that sends its request line and
headers a byte at a time (slowloris, RELIABILITY row 51), nor one that connects and sends
nothing: each holds a socket for as long as its client likes, and enough of them exhaust
the process's file descriptors. Here the request line and headers must have arrived within
``gateway.header_timeout_s`` of the connection opening (its first request) or of the
request's first byte (later ones); a slower client gets ``408`` and the connection is
closed. Bodies have their own deadline (``gateway.body.read_timeout_s``), which a body that
has all arrived by the time it is read does not need: the protocol marks its request
(``BODY_RECEIVED_KEY``).

httptools puts no bound on headers (one 64 MB header answered 200, and eight at once
took the process from 108 to 549 MB): here one field (name and value)
over ``gateway.max_header_field_bytes``, or a request line and headers over
``gateway.max_header_bytes``, get ``431`` and the connection is closed, before the app
sees the request. The raw bytes of an unfinished head are counted as they arrive, so a
huge field is cut off after the cap plus one read, not buffered whole.

uvicorn writes a response's status line and headers apart from its body: two writes, two
syscalls and two TCP segments per response. Here the connection's writes are gathered until
the end of the event loop's current step (``_GatheredWrites``), so a response sent at once,
as every JSON answer is, leaves in one write: under wrk, 2.2 -> 1.2 write syscalls per
submit-and-wait request (``strace -c``, ``docs/benchmarks.md``).

The lifespan hands a ``HeaderDeadline`` and ``HeaderLimits`` to uvicorn's application
state, which uvicorn passes to every connection (``HEADER_TIMEOUT_KEY``,
``HEADER_LIMITS_KEY``); a config reload changes them for the connections that open after it.
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus
from typing import Any, cast

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from deepagents.errors import ErrorCode
from deepagents.gateway.problems import MEDIA_TYPE, Problem

HEADER_TIMEOUT_KEY = "deepagents.header_timeout_s"
HEADER_LIMITS_KEY = "deepagents.header_limits"
# Set in a request's scope once its whole body has arrived (``body.read_body``).
BODY_RECEIVED_KEY = "deepagents.body_received"
DEFAULT_HEADER_TIMEOUT_S = 10.0
# Per header line (request line, or a field's name and value with ": " and CRLF).
_LINE_OVERHEAD = 4


class HeaderDeadline:
    """The header deadline in force, shared by the gateway's state and every connection."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


class HeaderLimits:
    """The header size caps in force, shared like ``HeaderDeadline``."""

    __slots__ = ("field_bytes", "total_bytes")

    def __init__(self, field_bytes: int = 16_384, total_bytes: int = 65_536) -> None:
        self.field_bytes = field_bytes
        self.total_bytes = total_bytes


class _GatheredWrites:
    """A connection's transport whose writes wait for the end of the event loop's current
    step and then go out as one. Everything but ``write`` and ``close`` is the transport's.
    Past ``_AT_ONCE`` bytes they go at once, so that a large body meets the transport's
    flow control (``pause_writing``) as it would unwrapped."""

    __slots__ = ("_loop", "_pending", "_size", "_transport")
    _AT_ONCE = 65_536

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self._size = 0

    def write(self, data: bytes) -> None:
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(data)
        self._size += len(data)
        if self._size >= self._AT_ONCE:
            self._flush()

    def close(self) -> None:
        self._flush()  # what was written before the close goes first, as it would have
        self._transport.close()

    def _flush(self) -> None:
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending, self._size = [], 0
        if not self._transport.is_closing():
            self._transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class HeaderDeadlineProtocol(HttpToolsProtocol):
    _headers_due: asyncio.TimerHandle | None = None
    _in_head = True  # the bytes arriving belong to a request line or headers
    _raw_head = 0  # bytes received since the head began (a chunk may hold some body too)
    _head = 0  # bytes of the head parsed so far
    _refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # The cycles of this connection's requests write through it (flow control and the
        # addresses read above use the transport itself).
        self.transport = cast(asyncio.Transport, _GatheredWrites(transport, self.loop))
        self._limits: HeaderLimits = self.app_state.get(HEADER_LIMITS_KEY) or HeaderLimits()
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._in_head:
            self._raw_head += len(data)
        super().data_received(data)
        # Still in the head after this read: all of it was head, none body.
        if self._in_head and not self._refused and self._raw_head > self._limits.total_bytes:
            self._refuse(f"the request line and headers are over {self._limits.total_bytes} bytes")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head = _LINE_OVERHEAD
        if self._headers_due is None:  # the first request keeps the connection's deadline
            self._arm()

    def on_url(self, url: bytes) -> None:
        self._head += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        size = len(name) + len(value) + _LINE_OVERHEAD
        self._head += size
        if self._refused:
            return
        if size > self._limits.field_bytes:
            self._refuse(
                f"header {name[:64].decode('latin-1')!r} is {size} bytes; at most "
                f"{self._limits.field_bytes} per field"
            )
        elif self._head > self._limits.total_bytes:
            self._refuse(f"the request line and headers are over {self._limits.total_bytes} bytes")
        else:
            super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._disarm()
        self._in_head = False
        if not self._refused:  # a refused request never reaches the app
            super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        self._in_head, self._raw_head = True, 0  # what follows is the next request's head
        if not self._refused:
            self.cycle.scope[BODY_RECEIVED_KEY] = True  # type: ignore[literal-required]
            super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        deadline: HeaderDeadline | None = self.app_state.get(HEADER_TIMEOUT_KEY)
        timeout = deadline.seconds if deadline is not None else DEFAULT_HEADER_TIMEOUT_S
        self._headers_due = self.loop.call_later(timeout, self._too_slow, timeout)

    def _disarm(self) -> None:
        if self._headers_due is not None:
            self._headers_due.cancel()
            self._headers_due = None

    def _too_slow(self, timeout: float) -> None:
        self._headers_due = None
        if self.transport.is_closing():
            return
        problem = Problem(
            ErrorCode.REQUEST_TIMEOUT,
            f"the request line and headers did not arrive within {timeout} s",
        )
        self.transport.write(_response(problem))
        self.transport.close()

    def _refuse(self, detail: str) -> None:
        self._refused = True
        self._disarm()
        if not self.transport.is_closing():
            self.transport.write(_response(Problem(ErrorCode.HEADERS_TOO_LARGE, detail)))
            self.transport.close()


def _response(problem: Problem) -> bytes:
    """The problem as a whole HTTP response that closes the connection, written by the
    protocol itself (the app never saw the request)."""
    body = orjson.dumps(problem.document())
    head = (
        f"HTTP/1.1 {problem.status} {HTTPStatus(problem.status).phrase}\r\n"
        f"content-type: {MEDIA_TYPE}\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body
