"""Group commit for the commands of many concurrent callers (the gateway's admissions).

Most of the gateway's CPU per request is per-round-trip work (a socket write and read,
packing, parsing), not per command. Concurrent requests therefore hand their commands to
one ``PipelineBatcher`` (the process's one group-commit mechanism,
``_internal/group_commit.py``): alone, a request's commands are sent at once; under load,
one round trip serves many requests. Each caller gets exactly its own replies, errors
included, so batching changes no request's outcome.

A batch goes over a connection of its own (``Lanes``), not through redis-py's pipeline:
replies come back as Redis sends them, without redis-py's per-command bookkeeping. On
Redis Cluster the lanes send each command to its key's node; the admission script names
all its keys, in one slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis, RedisCluster

from deepagents._internal.group_commit import GroupCommit
from deepagents.transport.redis_streams.lanes import Lanes

Command = tuple[Any, ...]


class PipelineBatcher:
    """Owns its connections: ``aclose()`` closes them."""

    def __init__(self, client: Redis | RedisCluster) -> None:
        self._lanes = Lanes(client)
        self._group: GroupCommit[Sequence[Command], list[Any]] = GroupCommit(
            self._send, name="gateway-redis-batch"
        )

    async def execute(self, commands: Sequence[Command]) -> list[Any]:
        """Queue the commands; their raw replies, in order (an error reply is returned as
        its exception). Connection errors are raised."""
        return await self._group(commands)

    async def aclose(self) -> None:
        await self._lanes.aclose()

    async def _send(self, batch: list[Sequence[Command]]) -> list[list[Any]]:
        flat = [command for commands in batch for command in commands]
        replies = await self._lanes.pipeline(flat, raise_on_error=False)
        out, start = [], 0
        for commands in batch:
            out.append(replies[start : start + len(commands)])
            start += len(commands)
        return out
