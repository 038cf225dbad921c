"""Connections for the worker's stream commands (read, reclaim, begin, commit), no pool.

Through redis-py's client every command pays the pool's lock and wait timeout, the
client's retry wrapper and its reply callbacks: about 130 µs of CPU per command on the
reference machine, against about 55 µs sending on a connection directly (both with the
hiredis parser; ``loadtests/bench_redis_client.py``). The hot commands carry a batch
each, but at thousands of tasks a second that difference is a large share of what the
worker spends.

Each exchange takes an idle connection (or opens one), writes its commands in one go,
reads every reply, and gives the connection back. A connection that failed or was
cancelled mid-exchange may have replies in flight: it is closed, never reused. Errors are
redis-py's exceptions, as from the client, so callers map them the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection


class Lanes:
    """Owned by one bus; ``aclose()`` closes the connections it opened."""

    def __init__(self, client: Redis) -> None:
        self._pool: Any = client.connection_pool
        self._idle: list[AbstractConnection] = []
        self._open: set[AbstractConnection] = set()

    async def call(self, *command: Any) -> Any:
        (reply,) = await self.pipeline([command])
        return reply

    async def pipeline(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Send the commands in one write and return their replies, in order. An error
        reply raises (the connection is then closed: later replies were left unread)."""
        conn = self._idle.pop() if self._idle else self._connection()
        try:
            await conn.send_packed_command(conn.pack_commands(commands), check_health=False)
            replies = [await conn.read_response() for _ in commands]
        except BaseException:
            self._open.discard(conn)
            await conn.disconnect(nowait=True)
            raise
        self._idle.append(conn)
        return replies

    def _connection(self) -> AbstractConnection:
        conn: AbstractConnection = self._pool.make_connection()
        self._open.add(conn)
        return conn

    async def aclose(self) -> None:
        conns, self._open, self._idle = self._open, set(), []
        for conn in conns:
            await conn.disconnect()
