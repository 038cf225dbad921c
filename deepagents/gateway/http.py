"""uvicorn's HTTP protocol (httptools) with a deadline for the request line and headers.

uvicorn closes an idle keep-alive connection, but not one that sends its request line and
headers a byte at a time (slowloris, RELIABILITY row 51), nor one that connects and sends
nothing: each holds a socket for as long as its client likes, and enough of them exhaust
the process's file descriptors. Here the request line and headers must have arrived within
``gateway.header_timeout_s`` of the connection opening (its first request) or of the
request's first byte (later ones); a slower client gets ``408`` and the connection is
closed. Bodies have their own deadline (``gateway.body.read_timeout_s``).

The lifespan hands a ``HeaderDeadline`` to uvicorn's application state, which uvicorn
passes to every connection (``HEADER_TIMEOUT_KEY``); a config reload changes its
``seconds`` for the connections that open after it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from deepagents.errors import ErrorCode
from deepagents.gateway.problems import MEDIA_TYPE, Problem

HEADER_TIMEOUT_KEY = "deepagents.header_timeout_s"
DEFAULT_HEADER_TIMEOUT_S = 10.0


class HeaderDeadline:
    """The header deadline in force, shared by the gateway's state and every connection."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


class HeaderDeadlineProtocol(HttpToolsProtocol):
    _headers_due: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._headers_due is None:  # the first request keeps the connection's deadline
            self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

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
        self.transport.write(_response(problem.document()))
        self.transport.close()


def _response(document: dict[str, Any]) -> bytes:
    body = orjson.dumps(document)
    head = (
        "HTTP/1.1 408 Request Timeout\r\n"
        f"content-type: {MEDIA_TYPE}\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body
