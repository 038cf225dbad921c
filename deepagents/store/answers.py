"""The last good answer per (agent, cache key): what ``degrade`` answers from when an agent
declares ``cache_key(task)`` and no ``degraded_execute``.

Bounded three ways: one value per key (the newest good answer replaces the last), a TTL
(``answer_cache_ttl_s``; an old answer is worse than a next-tier run), and a size cap per
value (a large output is not cached at all). Written after a successful, non-degraded run;
a lost write only means the next degrade finds no answer and moves the task a tier down.
"""

from __future__ import annotations

from redis.asyncio import Redis

from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams.errors import redis_errors

# An answer larger than this is not kept: the cache is a fallback, not a result store.
MAX_ANSWER_BYTES = 64 * 1024


class AnswerCache:
    def __init__(self, client: Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    async def get(self, agent: str, cache_key: str) -> bytes | None:
        with redis_errors("read a cached answer"):
            raw = await self.client.get(self.keys.answer(agent, cache_key))
        return raw.encode() if isinstance(raw, str) else raw

    async def put(self, agent: str, cache_key: str, output_json: bytes, ttl_s: int) -> bool:
        """Keep ``output_json`` (the Result's output as JSON); False when too large."""
        if len(output_json) > MAX_ANSWER_BYTES:
            return False
        with redis_errors("cache an answer"):
            await self.client.set(self.keys.answer(agent, cache_key), output_json, ex=ttl_s)
        return True
