"""Group commit for the gateway's own Redis commands.

Most of the gateway's CPU per request is per-round-trip work (a socket write and read,
taking and returning a pool connection, packing, parsing), not per command. Concurrent
requests therefore hand their commands to one ``PipelineBatcher``: while one pipeline is
on the wire, the commands that arrive queue up and go together in the next one. Alone, a
request's commands are sent at once (no timer, no added delay); under load, one round
trip serves many requests. Each caller gets exactly its own replies, errors included
(``raise_on_error=False``), so batching changes no request's outcome.

A plain (non-transactional) pipeline may mix hash slots, so this holds on Redis Cluster
too; scripts still name all their keys in KEYS, each within one slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

Commands = Callable[[Pipeline], object]


class PipelineBatcher:
    def __init__(self, client: Redis) -> None:
        self.client = client
        self._queue: list[tuple[Commands, asyncio.Future[list[Any]]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def execute(self, commands: Commands) -> list[Any]:
        """Queue the commands ``commands(pipe)`` adds; their replies, in order (an error
        reply is returned as its exception). Connection errors are raised."""
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._queue.append((commands, future))
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush(), name="gateway-redis-batch")
        return await future

    async def _flush(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                await self._send(batch)
        finally:
            self._flusher = None

    async def _send(self, batch: list[tuple[Commands, asyncio.Future[list[Any]]]]) -> None:
        bounds = []
        try:
            pipe = self.client.pipeline(transaction=False)
            for commands, _ in batch:
                start = len(pipe)
                commands(pipe)
                bounds.append((start, len(pipe)))
            replies = await pipe.execute(raise_on_error=False)
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
        for (_, future), (start, end) in zip(batch, bounds, strict=True):
            if not future.done():  # a caller that went away (client disconnect) is skipped
                future.set_result(replies[start:end])
