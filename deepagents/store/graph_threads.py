"""LangGraph threads kept outside a task: one Redis hash per thread, ``<prefix>:lg:{<id>}``.

A graph run by a task keeps its checkpoints in the task's own records (owner-checked,
``deepagents/langgraph/records.py``); this store is for a graph run outside any task
(scripts, tests, tools that read a thread back). Nothing here checks an owner: whoever
holds the client writes.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis

from deepagents.transport.redis_streams.errors import redis_errors


class ThreadStore:
    def __init__(self, client: Redis, prefix: str, *, ttl_s: int | None = None) -> None:
        self.client, self.prefix, self.ttl_s = client, prefix, ttl_s

    def _key(self, thread_id: str) -> str:
        return f"{self.prefix}:lg:{{{thread_id}}}"

    async def load(self, thread_id: str) -> dict[str, bytes]:
        with redis_errors(f"load graph thread {thread_id}"):
            flat = await self.client.hgetall(self._key(thread_id))
        return {_text(name): _bytes(value) for name, value in flat.items()}

    async def save(self, thread_id: str, fields: Sequence[tuple[str, bytes]]) -> None:
        if not fields:
            return
        key = self._key(thread_id)
        with redis_errors(f"record graph thread {thread_id}"):
            pipe = self.client.pipeline(transaction=True)
            pipe.hset(key, mapping=dict(fields))
            if self.ttl_s is not None:
                pipe.expire(key, self.ttl_s)
            await pipe.execute()

    async def delete(self, thread_id: str) -> None:
        with redis_errors(f"delete graph thread {thread_id}"):
            await self.client.delete(self._key(thread_id))

    async def threads(self) -> list[str]:
        start = len(self.prefix) + len(":lg:{")
        with redis_errors("list graph threads"):
            keys = [k async for k in self.client.scan_iter(match=f"{self.prefix}:lg:*")]
        return [_text(key)[start:-1] for key in keys]


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value
