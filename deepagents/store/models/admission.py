"""Fleet-wide admission: requests and tokens per window, and in-flight calls, kept in Redis.

A call reserves its estimated tokens (an upper bound of its input + max_tokens) before it
goes out; when the response reports its usage the reservation is corrected in the bucket
it was made in, so the window's total becomes exact and the unused tokens return. Usage
above the reservation is debt: charged to the window before the call's slot is freed.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from redis.asyncio import Redis

# Buckets are kept longer than the window, by at least two buckets and half a second: an
# event late in a bucket and the admission that follows its expiry are then more than one
# window apart even when a request reaches the provider a little after its admission
# (network, a busy event loop). Counted on Redis's clock, so workers' clocks do not matter.
_MARGIN_BUCKETS = 2
_MARGIN_MS = 500

# KEYS: hash of buckets. ARGV: bucket_ms, window_ms, rpm, tpm (-1 = none), tokens, margin.
# Returns {1, bucket} when admitted, {0, wait_ms} when not (-1: can never fit).
_ADMIT = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local size, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local rpm, tpm, want = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
if tpm >= 0 and want > tpm then return {0, -1} end
local bucket = math.floor(now / size)
local margin = tonumber(ARGV[6])
local cutoff = bucket - math.ceil(window / size) - margin
local flat = redis.call('HGETALL', KEYS[1])
local reqs, toks, live = 0, 0, {}
for i = 1, #flat, 2 do
  local kind, b = string.sub(flat[i], 1, 1), tonumber(string.sub(flat[i], 3))
  local v = tonumber(flat[i + 1])
  if b <= cutoff then
    redis.call('HDEL', KEYS[1], flat[i])
  else
    if kind == 'r' then reqs = reqs + v else toks = toks + v end
    live[b] = live[b] or {0, 0}
    if kind == 'r' then live[b][1] = live[b][1] + v else live[b][2] = live[b][2] + v end
  end
end
local function fits(r, k) return (rpm < 0 or r + 1 <= rpm) and (tpm < 0 or k + want <= tpm) end
if fits(reqs, toks) then
  redis.call('HINCRBY', KEYS[1], 'r:' .. bucket, 1)
  redis.call('HINCRBY', KEYS[1], 't:' .. bucket, want)
  redis.call('PEXPIRE', KEYS[1], window + (margin + 1) * size)
  return {1, bucket}
end
local order = {}
for b in pairs(live) do table.insert(order, b) end
table.sort(order)
for _, b in ipairs(order) do
  reqs, toks = reqs - live[b][1], toks - live[b][2]
  if fits(reqs, toks) then
    return {0, math.max(1, (b + bucket - cutoff) * size - now)}
  end
end
return {0, size}
"""

# KEYS: hash of buckets. ARGV: bucket, delta, bucket_ms, ttl_ms. Corrects a reservation in
# its bucket; usage above it whose bucket has expired is charged to the current bucket
# instead (debt), so an under-reserved call always delays the next ones.
_CORRECT = """
local delta = tonumber(ARGV[2])
if redis.call('HEXISTS', KEYS[1], 't:' .. ARGV[1]) == 1 then
  return redis.call('HINCRBY', KEYS[1], 't:' .. ARGV[1], delta)
end
if delta <= 0 then return 0 end
local t = redis.call('TIME')
local bucket = math.floor((t[1] * 1000 + math.floor(t[2] / 1000)) / tonumber(ARGV[3]))
redis.call('HINCRBY', KEYS[1], 't:' .. bucket, delta)
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]))
return delta
"""


@dataclass(frozen=True, slots=True)
class Reservation:
    key: str
    bucket: int
    tokens: int


@dataclass(frozen=True, slots=True)
class Admission:
    reservation: Reservation | None
    wait_s: float = 0.0  # when refused: how long until it could fit; < 0 never


class RateLimiter:
    """Requests and tokens per window for one model (or one API key), fleet-wide."""

    def __init__(
        self, redis: Redis, key: str, *, rpm: int | None, tpm: int | None, window_s: float
    ) -> None:
        self._key = key
        self._rpm = -1 if rpm is None else rpm
        self._tpm = -1 if tpm is None else tpm
        self._window_ms = int(window_s * 1000)
        # About 60 buckets per window, never finer than 100 ms (the cost is one HGETALL).
        self._bucket_ms = max(100, self._window_ms // 60)
        self._margin = max(_MARGIN_BUCKETS, -(-_MARGIN_MS // self._bucket_ms))
        self._admit = redis.register_script(_ADMIT)
        self._correct = redis.register_script(_CORRECT)

    @property
    def active(self) -> bool:
        return self._rpm >= 0 or self._tpm >= 0

    def clamp(self, tokens: int, *, floor: int) -> int:
        """``tokens`` to reserve, cut to the whole window when only an over-cautious bound
        (not the likely ``floor``) is over it: the call then waits for an empty window."""
        if self._tpm < 0 or floor > self._tpm:
            return tokens
        return max(floor, min(tokens, self._tpm))

    async def try_admit(self, tokens: int) -> Admission:
        ok, value = await self._admit(
            keys=[self._key],
            args=[self._bucket_ms, self._window_ms, self._rpm, self._tpm, tokens, self._margin],
        )
        if ok:
            return Admission(Reservation(self._key, int(value), tokens))
        return Admission(None, wait_s=-1.0 if int(value) < 0 else int(value) / 1000)

    async def correct(self, reservation: Reservation, actual_tokens: int) -> None:
        delta = actual_tokens - reservation.tokens
        if delta:
            ttl_ms = self._window_ms + (self._margin + 1) * self._bucket_ms
            await self._correct(
                keys=[reservation.key], args=[reservation.bucket, delta, self._bucket_ms, ttl_ms]
            )


# KEYS: lease zset. ARGV: limit, ttl_ms, member. Expired leases (dead holders) are dropped.
_LEASE = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
return 1
"""


class FleetConcurrency:
    """At most ``limit`` calls in flight across all workers; leases expire if a holder dies."""

    def __init__(self, redis: Redis, key: str, limit: int) -> None:
        self._redis = redis
        self._key = key
        self._limit = limit
        self._lease = redis.register_script(_LEASE)

    async def try_acquire(self, ttl_s: float) -> str | None:
        member = uuid.uuid4().hex
        got = await self._lease(
            keys=[self._key], args=[self._limit, max(1, int(ttl_s * 1000)), member]
        )
        return member if got else None

    async def release(self, member: str) -> None:
        await self._redis.zrem(self._key, member)
