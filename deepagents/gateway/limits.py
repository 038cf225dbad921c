"""Per-tenant admission, fleet-wide: a token bucket and an in-flight cap in Redis.

One script per request does both, on Redis's clock (``TIME``), so every gateway process
shares one bucket and one in-flight set per tenant and no process's clock skew matters.
An in-flight slot is a sorted-set member scored by its lease expiry: a gateway killed
mid-request leaks nothing for longer than the lease.
"""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import redis.exceptions as rex
from redis.asyncio import Redis

from deepagents.errors import ErrorCode
from deepagents.gateway.batcher import PipelineBatcher
from deepagents.gateway.config import GatewayConfig
from deepagents.gateway.problems import Problem

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


class Admission:
    def __init__(self, client: Redis, prefix: str, config: GatewayConfig) -> None:
        self.client = client
        self.prefix = prefix
        self.config = config
        self._sha = hashlib.sha1(_ADMIT.encode()).hexdigest()  # noqa: S324 - Redis names scripts by SHA-1
        # Concurrent requests' admissions and releases share round trips (see batcher).
        self._batcher = PipelineBatcher(client)

    async def aclose(self) -> None:
        await self._batcher.aclose()

    def keys(self, tenant: str) -> TenantKeys:
        # One hash tag per tenant: both keys in one slot on Redis Cluster. Tenant names are
        # validated by the config (no braces), so they cannot reshape the tag.
        tag = f"{self.prefix}:gw:{{tenant:{tenant}}}"
        return TenantKeys(f"{tag}:bucket", f"{tag}:inflight")

    async def _run(
        self,
        keys: TenantKeys,
        args: list[float | int | str],
        claims: Sequence[tuple[str, str]],
        ttl_s: int,
    ) -> tuple[int, int]:
        # EVALSHA, not a registered Script object: that would make redis-py send SCRIPT
        # EXISTS before every pipeline (one more round trip per request).
        commands = [
            ("EVALSHA", self._sha, 2, keys.bucket, keys.inflight, *args),
            *(("SET", key, value, "EX", ttl_s) for key, value in claims),
        ]

        for attempt in range(2):
            replies = await self._batcher.execute(commands)
            first = replies[0]
            if isinstance(first, rex.NoScriptError) and attempt == 0:
                await self.client.script_load(_ADMIT)  # first use, or Redis restarted
                continue
            if isinstance(first, Exception):
                raise first
            verdict, retry_ms = int(first[0]), int(first[1])
            if verdict != 1 and claims:
                await self.client.delete(*(key for key, _ in claims))
            return verdict, retry_ms
        raise AssertionError("unreachable")  # pragma: no cover

    @contextlib.asynccontextmanager
    async def admit(
        self,
        tenant: str,
        cost: int = 1,
        *,
        claims: Sequence[tuple[str, str]] = (),
        claim_ttl_s: int = 0,
    ) -> AsyncIterator[None]:
        """Hold an in-flight slot for the body of the ``async with``; 429 when refused.

        ``claims`` are (key, value) records set in the same round trip (the owner and
        location records of tasks about to be submitted); they are removed again if
        admission is refused.
        """
        limits = self.config.limits_for(tenant)
        if cost > limits.burst:
            raise Problem(
                ErrorCode.BATCH_TOO_LARGE,
                f"this request needs {cost} tokens but your burst is {limits.burst}; "
                "send smaller batches",
            )
        keys = self.keys(tenant)
        slot = uuid.uuid4().hex
        lease_ms = int(self.config.request_lease_s * 1000)
        args: list[float | int | str] = [
            limits.rate_per_s,
            limits.burst,
            cost,
            limits.max_in_flight,
            slot,
            lease_ms,
        ]
        try:
            verdict, retry_ms = await self._run(keys, args, claims, claim_ttl_s)
        except (rex.ConnectionError, rex.TimeoutError) as exc:
            raise Problem(
                ErrorCode.UNAVAILABLE, "Redis is unreachable; retry shortly", retry_after_s=1
            ) from exc
        if verdict == 0:
            raise Problem(
                ErrorCode.RATE_LIMITED,
                f"tenant {tenant!r} is over {limits.rate_per_s:g} tasks/s (burst {limits.burst}); "
                "wait Retry-After seconds",
                retry_after_s=max(int(retry_ms), 1) / 1000,
            )
        if verdict == -1:
            raise Problem(
                ErrorCode.TOO_MANY_IN_FLIGHT,
                f"tenant {tenant!r} already has {limits.max_in_flight} requests in flight; "
                "wait for some to finish",
                retry_after_s=max(int(retry_ms), 1) / 1000,
            )
        try:
            yield
        finally:
            with contextlib.suppress(rex.RedisError):
                (reply,) = await self._batcher.execute([("ZREM", keys.inflight, slot)])
                if isinstance(reply, rex.RedisError):
                    raise reply
