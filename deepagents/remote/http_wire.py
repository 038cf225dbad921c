"""The wire protocol over HTTP/1.1: one aiohttp session per remote agent, keep-alive.

aiohttp, not httpx: on loopback against the Node reference agent, one aiohttp session
made 6,353 POSTs/s on one connection and 10,949/s on 8, where httpx made 660 and 1,609
(``docs/benchmarks.md``, "Remote agents: the HTTP client"). A remote task makes up to four
calls, so the client's cost per call was most of what a remote agent's worker spent.

What the session is told, and why:
- no redirects (a redirect would let the service steer the worker elsewhere);
- no cookie jar (a service's cookies are not sent back, nor shared between calls);
- no proxies from the environment (``HTTP_PROXY``): the configured URL is what is dialled,
  and aiohttp looks proxies up in a thread on every request, which cost 0.3 ms a call
  (``bench_remote.py --calls``: 0.33 ms over a bare POST with it, 0.02 ms without);
- a total timeout per call; a call cancelled or timed out closes its connection (aiohttp
  never hands back a connection with an unread answer), so a slow service cannot pile
  up connections.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass

import aiohttp

from deepagents.remote.errors import hide_addresses, protocol_error


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    retry_after: str | None
    body: bytes


class HttpWire:
    """Owned by one ``RemoteAgent``; ``aclose()`` closes its connections. The session is
    opened on the first call, inside the running event loop (aiohttp's requirement)."""

    def __init__(
        self,
        base: str,
        headers: dict[str, str],
        tls: ssl.SSLContext | bool,
        *,
        max_connections: int,
        max_response_bytes: int,
    ) -> None:
        self._base = base
        self._headers = headers
        self._tls = tls
        self._max_connections = max_connections
        self._limit = max_response_bytes
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections, limit_per_host=0, ssl=self._tls
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers=self._headers,
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
            )
        return self._session

    async def post(
        self,
        step: str,
        body: bytes,
        headers: dict[str, str],
        timeout: float,
        limit: int | None = None,
    ) -> Answer:
        """``POST <base>/<step>``: the answer, its body read up to the size limit (``limit``
        when given: a batch's answer may hold one answer's worth per task). Raises
        ``TimeoutError`` when ``timeout`` ran out, ``aiohttp.ClientError`` when the service
        could not be reached or broke the connection, ``RemoteProtocolError`` past the
        size limit."""
        return await self._request("POST", step, body, headers, timeout, limit or self._limit)

    async def get(self, step: str, timeout: float) -> Answer:
        return await self._request("GET", step, None, {}, timeout, self._limit)

    async def _request(
        self,
        method: str,
        step: str,
        body: bytes | None,
        headers: dict[str, str],
        timeout: float,
        limit: int,
    ) -> Answer:
        session = self._open()
        async with session.request(
            method,
            f"{self._base}/{step}",
            data=body,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout),
            allow_redirects=False,
        ) as response:
            raw = await self._read(step, response, limit)
            return Answer(
                response.status,
                response.headers.get("content-type", ""),
                response.headers.get("retry-after"),
                raw,
            )

    async def _read(self, step: str, response: aiohttp.ClientResponse, limit: int) -> bytes:
        """The body, refused past the size limit without reading the rest."""
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise protocol_error(step, f"response of {declared} bytes over {limit}")
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.content.iter_any():
            size += len(chunk)
            if size > limit:
                raise protocol_error(step, f"response over {limit} bytes", b"".join(chunks))
            chunks.append(chunk)
        return b"".join(chunks)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def why(exc: BaseException) -> str:
    """A transport failure in words that do not depend on the HTTP client's class names
    (operators grep for them, and the health reason shows them), without the service's
    address (tenants read task errors; anyone reads the full health check)."""
    if isinstance(exc, aiohttp.ClientConnectorError | ConnectionRefusedError):
        return hide_addresses(f"ConnectError: {exc}")
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "Disconnected: the service closed the connection before answering"
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return "Timeout: no answer in time"
    return hide_addresses(f"{type(exc).__name__}: {exc}")
