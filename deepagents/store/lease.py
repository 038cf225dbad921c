"""A leadership lease in Redis: ``SET NX PX`` to take it, renewed and released only by its
holder (owner-checked scripts), so at most one process holds it at a time and another
takes over within one TTL after the holder dies (``kill -9`` included)."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from deepagents.transport.redis_streams.errors import redis_errors

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class RedisLease:
    def __init__(
        self, client: Redis, key: str, owner: str, ttl_ms: int, *, what: str = "rollout"
    ) -> None:
        self.client: Any = client
        self.key, self.owner, self.ttl_ms, self.what = key, owner, ttl_ms, what
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    async def hold(self) -> bool:
        """Renew the lease if this owner holds it, else try to take it; True if held now."""
        with redis_errors(f"hold the {self.what} lease"):
            if await self._renew(keys=[self.key], args=[self.owner, self.ttl_ms]):
                return True
            return bool(await self.client.set(self.key, self.owner, nx=True, px=self.ttl_ms))

    async def holder(self) -> str | None:
        with redis_errors(f"read the {self.what} lease"):
            raw = await self.client.get(self.key)
        return None if raw is None else raw.decode(errors="replace")

    async def release(self) -> None:
        with redis_errors(f"release the {self.what} lease"):
            await self._release(keys=[self.key], args=[self.owner])
