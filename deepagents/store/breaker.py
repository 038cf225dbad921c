"""The fleet's circuit breaker, kept in Redis: one per model (``store.models.gates``) and one
per remote agent service (``deepagents.remote``), the same logic behind both.

Closed, it counts attempts in a sliding window of buckets; past ``failure_rate`` over at
least ``min_calls`` it opens for every worker at once. After ``cooldown_s`` it is half-open:
the next ``allow`` is the single probe (held for ``probe_ttl_s``, so a probe whose worker died
is given to another), and the probe's outcome closes or re-opens it. Each step is one Lua
script on the keys' hash slot, timed by Redis ``TIME`` so workers with skewed clocks agree.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from redis.asyncio import Redis

from deepagents.config.models import BreakerConfig


class BreakerKeys(Protocol):
    """Where one breaker lives: its state hash and its window hash, in one hash slot."""

    @property
    def breaker(self) -> str: ...

    @property
    def breaker_window(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Keyed:
    """``BreakerKeys`` given as two names (``transport.keys`` builds them)."""

    breaker: str
    breaker_window: str


_NOW_MS = "local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000)\n"

# KEYS: state hash. ARGV: cooldown_ms, probe_ttl_ms. Returns {allowed, probe_or_wait_ms}.
_ALLOW = (
    _NOW_MS
    + """
local state = redis.call('HGET', KEYS[1], 'state') or 'closed'
if state == 'closed' then return {1, 0} end
if state == 'open' then
  local opened = tonumber(redis.call('HGET', KEYS[1], 'opened_at') or '0')
  local reopen = opened + tonumber(ARGV[1])
  if now < reopen then return {0, reopen - now} end
  redis.call('HSET', KEYS[1], 'state', 'half_open')
end
local probe_until = tonumber(redis.call('HGET', KEYS[1], 'probe_until') or '0')
if now < probe_until then return {0, probe_until - now} end
redis.call('HSET', KEYS[1], 'probe_until', now + tonumber(ARGV[2]))
return {1, 1}
"""
)

# KEYS: state hash, window hash ("o:<bucket>" / "f:<bucket>" counts). ARGV: successes,
# failures, probe (1/0), window_ms, bucket_ms, min_calls, failure_rate. Returns the state.
_RECORD = (
    _NOW_MS
    + """
local state = redis.call('HGET', KEYS[1], 'state') or 'closed'
local oks, fails = tonumber(ARGV[1]), tonumber(ARGV[2])
if state == 'half_open' then
  if ARGV[3] ~= '1' then return state end
  redis.call('HDEL', KEYS[1], 'probe_until')
  if fails == 0 then
    redis.call('HSET', KEYS[1], 'state', 'closed')
    redis.call('DEL', KEYS[2])
    return 'closed'
  end
  redis.call('HSET', KEYS[1], 'state', 'open', 'opened_at', now)
  return 'open'
end
if state == 'open' then return state end
local window, size = tonumber(ARGV[4]), tonumber(ARGV[5])
local bucket = math.floor(now / size)
if oks > 0 then redis.call('HINCRBY', KEYS[2], 'o:' .. bucket, oks) end
if fails > 0 then redis.call('HINCRBY', KEYS[2], 'f:' .. bucket, fails) end
redis.call('PEXPIRE', KEYS[2], window * 2)
if fails == 0 then return 'closed' end
local cutoff = bucket - math.ceil(window / size)
local flat = redis.call('HGETALL', KEYS[2])
local ok_sum, fail_sum = 0, 0
for i = 1, #flat, 2 do
  local b = tonumber(string.sub(flat[i], 3))
  if b <= cutoff then
    redis.call('HDEL', KEYS[2], flat[i])
  elseif string.sub(flat[i], 1, 1) == 'o' then
    ok_sum = ok_sum + tonumber(flat[i + 1])
  else
    fail_sum = fail_sum + tonumber(flat[i + 1])
  end
end
local total = ok_sum + fail_sum
if total >= tonumber(ARGV[6]) and fail_sum / total >= tonumber(ARGV[7]) then
  redis.call('HSET', KEYS[1], 'state', 'open', 'opened_at', now)
  redis.call('DEL', KEYS[2])
  return 'open'
end
return 'closed'
"""
)

# Successes in a closed circuit are counted locally and sent at most this often (and with
# every failure), so the hot path of a healthy model costs no Redis round trip.
SUCCESS_FLUSH_S = 0.25


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, slots=True)
class Permit:
    allowed: bool
    probe: bool = False
    retry_in_s: float = 0.0


class CircuitBreaker:
    """Closed → open when the failure rate over the window passes the threshold; open →
    half-open after the cool-down, where a single probe decides: success closes it."""

    def __init__(self, redis: Redis, keys: BreakerKeys, config: BreakerConfig) -> None:
        self._redis = redis
        self._keys = keys
        self._config = config
        self._allow = redis.register_script(_ALLOW)
        self._record = redis.register_script(_RECORD)
        self._closed_until = 0.0  # time.monotonic() until which 'closed' is trusted
        self._pending_ok = 0
        self._flushed_at = time.monotonic()
        window_ms = int(config.window_s * 1000)
        self._bucket_ms = max(100, window_ms // 30)

    async def allow(self, probe_ttl_s: float) -> Permit:
        # A 'closed' read moments ago is trusted for state_cache_s: the hot path then costs
        # no round trip, and a breaker opened by another worker is seen that much later.
        if time.monotonic() < self._closed_until:
            return Permit(True)
        allowed, extra = await self._allow(
            keys=[self._keys.breaker],
            args=[int(self._config.cooldown_s * 1000), max(1, int(probe_ttl_s * 1000))],
        )
        if allowed:
            if not extra:
                self._closed_until = time.monotonic() + self._config.state_cache_s
            return Permit(True, probe=bool(extra))
        return Permit(False, retry_in_s=int(extra) / 1000)

    def note_success(self) -> bool:
        """Count a success locally; True when it is time to ``flush()``."""
        self._pending_ok += 1
        return time.monotonic() - self._flushed_at >= SUCCESS_FLUSH_S

    async def flush(self) -> None:
        if self._pending_ok:
            await self._send(oks=0, fails=0, probe=False)

    async def record(self, ok: bool, *, probe: bool) -> BreakerState:
        """Record an attempt now (failures and probes), with the successes pending."""
        return await self._send(oks=int(ok), fails=int(not ok), probe=probe)

    async def _send(self, *, oks: int, fails: int, probe: bool) -> BreakerState:
        oks, self._pending_ok = oks + self._pending_ok, 0
        self._flushed_at = time.monotonic()
        state = await self._record(
            keys=[self._keys.breaker, self._keys.breaker_window],
            args=[
                oks,
                fails,
                int(probe),
                int(self._config.window_s * 1000),
                self._bucket_ms,
                self._config.min_calls,
                self._config.failure_rate,
            ],
        )
        result = BreakerState(_text(state))
        if result is not BreakerState.CLOSED:
            self._closed_until = 0.0  # this worker sees its own opening at once
        return result

    async def state(self) -> BreakerState:
        raw = await self._redis.hget(self._keys.breaker, "state")
        return BreakerState(_text(raw)) if raw else BreakerState.CLOSED
