"""Per-tenant admission state, fleet-wide: a token bucket and an in-flight cap in Redis.

One script per request does both, on Redis's clock (``TIME``), so every gateway process
shares one bucket and one in-flight set per tenant and no process's clock skew matters.
An in-flight slot is a sorted-set member scored by its lease expiry: a gateway killed
mid-request leaks nothing for longer than the lease. What a refusal means to an HTTP
client is the gateway's business (``gateway/limits.py``).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.exceptions as rex
from redis.asyncio import Redis, RedisCluster

from deepagents.errors import TransportError
from deepagents.transport.redis_streams.batcher import PipelineBatcher

# KEYS[1] bucket hash, KEYS[2] in-flight zset
# ARGV[1] rate/s, [2] burst, [3] cost, [4] max in flight, [5] slot id, [6] lease ms
# Returns {1, 0} admitted, {0, retry_ms} out of tokens, {-1, retry_ms} too many in flight.
_ADMIT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(b[1]) or burst
local ts = tonumber(b[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate / 1000)
if tokens < cost then
  return {0, math.ceil((cost - tokens) * 1000 / rate)}
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[4]) then
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return {-1, math.min(1000, tonumber(first[2]) - now)}
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens - cost), 'ts', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 1000)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[6]), ARGV[5])
redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[6]) + 1000)
return {1, 0}
"""


@dataclass(frozen=True, slots=True)
class TenantKeys:
    bucket: str
    inflight: str


@dataclass(frozen=True, slots=True)
class Ask:
    """One admission: ``cost`` tokens and one in-flight slot, leased for ``lease_ms``."""

    rate_per_s: float
    burst: int
    cost: int
    max_in_flight: int
    slot: str
    lease_ms: int


class TenantLimiter:
    """Owns its connections (concurrent requests share round trips): ``aclose()``."""

    def __init__(self, client: Redis | RedisCluster, prefix: str) -> None:
        self.client: Any = client
        self.prefix = prefix
        self._sha = hashlib.sha1(_ADMIT.encode()).hexdigest()  # noqa: S324 - Redis names scripts by SHA-1
        self._batcher = PipelineBatcher(client)

    async def aclose(self) -> None:
        await self._batcher.aclose()

    def keys(self, tenant: str) -> TenantKeys:
        # One hash tag per tenant: both keys in one slot on Redis Cluster. Tenant names are
        # validated by the config (no braces), so they cannot reshape the tag.
        tag = f"{self.prefix}:gw:{{tenant:{tenant}}}"
        return TenantKeys(f"{tag}:bucket", f"{tag}:inflight")

    async def acquire(
        self, tenant: str, ask: Ask, claims: Sequence[tuple[str, str]], ttl_s: int
    ) -> tuple[int, int]:
        """(verdict, retry ms): 1 admitted, 0 out of tokens, -1 too many in flight. The
        ``claims`` (key, value) are set in the same round trip, and removed again when
        refused. Raises ``TransportError`` (retryable) when Redis is unreachable."""
        try:
            return await self._run(self.keys(tenant), ask, claims, ttl_s)
        except (rex.ConnectionError, rex.TimeoutError) as exc:
            raise TransportError(f"admission: Redis unreachable ({exc})") from exc

    async def _run(
        self, keys: TenantKeys, ask: Ask, claims: Sequence[tuple[str, str]], ttl_s: int
    ) -> tuple[int, int]:
        args = (ask.rate_per_s, ask.burst, ask.cost, ask.max_in_flight, ask.slot, ask.lease_ms)
        # EVALSHA, not a registered Script object: that would make redis-py send SCRIPT
        # EXISTS before every pipeline (one more round trip per request).
        commands = [
            ("EVALSHA", self._sha, 2, keys.bucket, keys.inflight, *args),
            *(("SET", key, value, "EX", ttl_s) for key, value in claims),
        ]
        try:
            for attempt in range(2):
                replies = await self._batcher.execute(commands)
                first = replies[0]
                if isinstance(first, rex.NoScriptError) and attempt == 0:
                    await self.client.script_load(_ADMIT)  # first use, or Redis restarted
                    continue
                if isinstance(first, Exception):
                    raise first
                verdict, retry_ms = int(first[0]), int(first[1])
                if verdict != 1:
                    await self._unclaim(claims)
                return verdict, retry_ms
        except Exception:
            # The claims may have been written even though admission failed (they ride in
            # the same round trip): none may outlive a refused request.
            with contextlib.suppress(rex.RedisError):
                await self._unclaim(claims)
            raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _unclaim(self, claims: Sequence[tuple[str, str]]) -> None:
        if claims:
            await self.client.delete(*(key for key, _ in claims))

    async def release(self, tenant: str, slot: str) -> None:
        """Give the in-flight slot back; a failure leaves it to expire with its lease."""
        with contextlib.suppress(rex.RedisError):
            (reply,) = await self._batcher.execute([("ZREM", self.keys(tenant).inflight, slot)])
            if isinstance(reply, rex.RedisError):
                raise reply
