"""A write Redis does not take (a peer that stopped reading) times out and closes the
connection, through the project's connection class (``asyncio.timeout`` rather than
redis-py's ``wait_for`` on Python 3.11); so does an exchange on the bus's own
connections that gets no reply."""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlparse

import pytest
import redis.exceptions as rex
from redis.asyncio import BlockingConnectionPool, Redis

from deepagents.transport.redis_streams.lanes import Lanes
from deepagents.transport.redis_streams.pool import _HiredisPackingConnection
from tests.support.proxy import SilencingProxy


async def test_a_stalled_write_times_out_and_closes_the_connection(redis_url: str) -> None:
    target = urlparse(redis_url)
    stalled = asyncio.Event()
    pipes: list[asyncio.Task[None]] = []
    writers: list[asyncio.StreamWriter] = []

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, up: bool) -> None:
        while not (up and stalled.is_set()):  # upstream stops reading once stalled
            data = await reader.read(65536)
            if not data:
                return
            writer.write(data)
            await writer.drain()
        await asyncio.Event().wait()

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        r, w = await asyncio.open_connection(target.hostname, target.port)
        writers.extend([writer, w])
        pipes.extend(
            [
                asyncio.ensure_future(pump(reader, w, True)),
                asyncio.ensure_future(pump(r, writer, False)),
            ]
        )

    server = await asyncio.start_server(proxy, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = _HiredisPackingConnection(host="127.0.0.1", port=port, socket_timeout=0.5)
    try:
        await conn.send_packed_command(conn.pack_command("PING"))
        assert await conn.read_response() in (b"PONG", "PONG")
        stalled.set()
        big = b"x" * (32 * 1024 * 1024)  # more than the socket buffers hold
        with pytest.raises(rex.TimeoutError, match="writing"):
            await asyncio.wait_for(conn.send_packed_command(conn.pack_command("SET", "k", big)), 10)
        assert not conn.is_connected
        assert conn.socket_timeout == 0.5  # restored for the next exchange
    finally:
        await conn.disconnect()
        for task in pipes:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*pipes, return_exceptions=True)
        for w in writers:  # closed here, not by the garbage collector after the loop ends
            w.close()
        await asyncio.gather(*(w.wait_closed() for w in writers), return_exceptions=True)
        server.close()
        await server.wait_closed()


async def test_a_silent_lane_times_out_within_its_socket_timeout_and_is_replaced(
    redis_url: str,
) -> None:
    """The bus's own connections bound a whole exchange (write and every read) by the
    socket timeout, with one timer; a lane that timed out is closed, and the next exchange
    opens another."""
    target = urlparse(redis_url)
    proxy = SilencingProxy(target.hostname or "127.0.0.1", target.port or 6379)
    await proxy.start()
    pool = BlockingConnectionPool.from_url(
        proxy.url, connection_class=_HiredisPackingConnection, socket_timeout=0.5
    )
    client = Redis.from_pool(pool)
    lanes = Lanes(client)
    try:
        assert await lanes.pipeline([("PING",), ("ECHO", "a")]) == [b"PONG", b"a"]
        proxy.silence()
        with pytest.raises(rex.TimeoutError, match=r"within 0\.5 s"):
            await asyncio.wait_for(lanes.pipeline([("PING",), ("ECHO", "b")]), 10)
        # A connection opened now is not silenced; the timed-out one was not kept.
        assert await asyncio.wait_for(lanes.pipeline([("ECHO", "c")]), 10) == [b"c"]
    finally:
        await lanes.aclose()
        await client.aclose()
        await proxy.close()
