"""Group commit for the commands of many concurrent callers (the gateway's admissions).

Most of the gateway's CPU per request is per-round-trip work (a socket write and read,
packing, parsing), not per command. Concurrent requests therefore hand their commands to
one ``PipelineBatcher``: while one batch is on the wire, the commands that arrive queue up
and go together in the next. Alone, a request's commands are sent at once (no timer, no
added delay); under load, one round trip serves many requests. Each caller gets exactly
its own replies, errors included, so batching changes no request's outcome.

A batch goes over a connection of its own (``Lanes``), not through redis-py's pipeline:
replies come back as Redis sends them, without redis-py's per-command bookkeeping. On
Redis Cluster the lanes send each command to its key's node; the admission script names
all its keys, in one slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis, RedisCluster

from deepagents.transport.redis_streams.lanes import Lanes

Command = tuple[Any, ...]


class PipelineBatcher:
    """Owns its connections: ``aclose()`` closes them."""

    def __init__(self, client: Redis | RedisCluster) -> None:
        self._lanes = Lanes(client)
        self._queue: list[tuple[Sequence[Command], asyncio.Future[list[Any]]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def execute(self, commands: Sequence[Command]) -> list[Any]:
        """Queue the commands; their raw replies, in order (an error reply is returned as
        its exception). Connection errors are raised."""
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._queue.append((commands, future))
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush(), name="gateway-redis-batch")
        return await future

    async def aclose(self) -> None:
        await self._lanes.aclose()

    async def _flush(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                await self._send(batch)
        finally:
            self._flusher = None

    async def _send(self, batch: list[tuple[Sequence[Command], asyncio.Future[list[Any]]]]) -> None:
        flat = [command for commands, _ in batch for command in commands]
        try:
            replies = await self._lanes.pipeline(flat, raise_on_error=False)
        except BaseException as exc:
            for _, future in batch:
                if future.done():
                    continue
                if isinstance(exc, Exception):
                    future.set_exception(exc)
                else:
                    future.cancel()
            if not isinstance(exc, Exception):
                raise  # cancelled (shutdown): the waiters have been told
            return
        start = 0
        for commands, future in batch:
            end = start + len(commands)
            if not future.done():  # a caller that went away (client disconnect) is skipped
                future.set_result(replies[start:end])
            start = end
