"""The fleet's circuit breaker, kept in Redis: one per model (``store.models.gates``) and one
per remote agent service (``deepagents.remote``), the same logic behind both.

Closed, it opens for every worker at once in either of two ways. A service that is down
(refused or reset connections, 502/503/504: ``down``) to ``down_after`` distinct tasks in a
row, with no answer between, trips it at once, whatever successes the window holds. And over
a sliding window of buckets, when the tasks that failed (each counted once, however often it
failed) reach ``failure_rate`` of the tasks that failed plus the calls that succeeded, over
at least ``min_calls``: so one task failing again and again does not open it for the others.
After ``cooldown_s`` it is half-open: the next ``allow`` is the single probe (held for
``probe_ttl_s``, so a probe whose worker died is given to another), and the probe's outcome
closes or re-opens it. Each step is one Lua script on the keys' hash slot, timed by Redis
``TIME`` so workers with skewed clocks agree.
"""

from __future__ import annotations

import asyncio
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

# KEYS: state hash ("streak", "gen", "sweep" beside the state), window hash ("o:<bucket>"
# successes, "f:<bucket>" tasks that failed, "t:<task>" = "<bucket>:<gen>" of its last
# failure). ARGV: successes, failures, probe (1/0), window_ms, bucket_ms, min_calls,
# failure_rate, down (1/0), task ("": none given), down_after. Returns the state.
_RECORD = (
    _NOW_MS
    + """
local state = redis.call('HGET', KEYS[1], 'state') or 'closed'
local oks, fails = tonumber(ARGV[1]), tonumber(ARGV[2])
local function trip()
  redis.call('HSET', KEYS[1], 'state', 'open', 'opened_at', now, 'streak', 0)
  redis.call('HDEL', KEYS[1], 'sweep')
  redis.call('DEL', KEYS[2])
  return 'open'
end
if state == 'half_open' then
  if ARGV[3] ~= '1' then return state end
  redis.call('HDEL', KEYS[1], 'probe_until')
  if fails == 0 then
    redis.call('HSET', KEYS[1], 'state', 'closed', 'streak', 0)
    redis.call('DEL', KEYS[2])
    return 'closed'
  end
  return trip()
end
if state == 'open' then return state end
local window, size = tonumber(ARGV[4]), tonumber(ARGV[5])
local bucket = math.floor(now / size)
local cutoff = bucket - math.ceil(window / size)
redis.call('PEXPIRE', KEYS[2], window * 2)
if oks > 0 then
  redis.call('HINCRBY', KEYS[2], 'o:' .. bucket, oks)
  -- any answer ends a streak: the next one starts a new generation
  if tonumber(redis.call('HGET', KEYS[1], 'streak') or '0') > 0 then
    redis.call('HINCRBY', KEYS[1], 'gen', 1)
    redis.call('HSET', KEYS[1], 'streak', 0)
  end
end
if fails == 0 then return 'closed' end
local gen = redis.call('HGET', KEYS[1], 'gen') or '0'
local new_task, in_streak = true, false
if ARGV[9] ~= '' then
  local seen = redis.call('HGET', KEYS[2], 't:' .. ARGV[9])
  if seen then
    local sep = string.find(seen, ':', 1, true)
    new_task = tonumber(string.sub(seen, 1, sep - 1)) <= cutoff
    in_streak = string.sub(seen, sep + 1) == gen
  end
  redis.call('HSET', KEYS[2], 't:' .. ARGV[9], bucket .. ':' .. gen)
end
if new_task then redis.call('HINCRBY', KEYS[2], 'f:' .. bucket, 1) end
local down_after = tonumber(ARGV[10])
if ARGV[8] == '1' and down_after > 0 and not in_streak then
  if redis.call('HINCRBY', KEYS[1], 'streak', 1) >= down_after then return trip() end
end
-- a few fields per failure are looked at, and those past the window dropped
local scan = redis.call('HSCAN', KEYS[2], redis.call('HGET', KEYS[1], 'sweep') or '0', 'COUNT', 16)
redis.call('HSET', KEYS[1], 'sweep', scan[1])
local flat = scan[2]
for i = 1, #flat, 2 do
  local name, value = flat[i], flat[i + 1]
  local b
  if string.sub(name, 1, 2) == 't:' then
    b = tonumber(string.sub(value, 1, string.find(value, ':', 1, true) - 1))
  else
    b = tonumber(string.sub(name, 3))
  end
  if b and b <= cutoff then redis.call('HDEL', KEYS[2], name) end
end
local names = {}
for b = cutoff + 1, bucket do
  names[#names + 1] = 'o:' .. b
  names[#names + 1] = 'f:' .. b
end
local counts = redis.call('HMGET', KEYS[2], unpack(names))
local ok_sum, fail_sum = 0, 0
for i = 1, #counts, 2 do
  ok_sum = ok_sum + tonumber(counts[i] or '0')
  fail_sum = fail_sum + tonumber(counts[i + 1] or '0')
end
local total = ok_sum + fail_sum
if total >= tonumber(ARGV[6]) and fail_sum / total >= tonumber(ARGV[7]) then return trip() end
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


ALLOWED = Permit(True)  # a closed circuit's leave: one shared instance (frozen)


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
        # The state being read now: True once it read 'closed' (a call's plain leave).
        self._reading: asyncio.Future[bool] | None = None
        self._pending_ok = 0
        self._flushed_at = time.monotonic()
        window_ms = int(config.window_s * 1000)
        self._bucket_ms = max(100, window_ms // 30)

    def allowed_now(self) -> bool:
        """Whether a 'closed' read moments ago (within ``state_cache_s``) lets a call go
        without asking ``allow``: the hot path then awaits nothing."""
        return time.monotonic() < self._closed_until

    async def allow(self, probe_ttl_s: float) -> Permit:
        # A 'closed' read moments ago is trusted for state_cache_s: the hot path then costs
        # no round trip, and a breaker opened by another worker is seen that much later.
        if self.allowed_now():
            return ALLOWED
        # Calls arriving while another reads the state share its 'closed': a busy process
        # does not send one read per call each time the cache runs out. Any other answer
        # (open, a probe to give) each call reads for itself.
        reading = self._reading
        if reading is not None and not reading.done() and await asyncio.shield(reading):
            return ALLOWED
        mine: asyncio.Future[bool] | None = None
        if self._reading is None or self._reading.done():
            mine = self._reading = asyncio.get_running_loop().create_future()
        closed = False
        try:
            allowed, extra = await self._allow(
                keys=[self._keys.breaker],
                args=[int(self._config.cooldown_s * 1000), max(1, int(probe_ttl_s * 1000))],
            )
            closed = bool(allowed) and not extra
        finally:
            if mine is not None and not mine.done():
                mine.set_result(closed)
        if allowed:
            if closed:
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

    async def record(
        self, ok: bool, *, probe: bool, down: bool = False, task: str | None = None
    ) -> BreakerState:
        """Record an attempt now (failures and probes), with the successes pending. ``down``:
        the failure says the service is not there at all (it feeds the streak); ``task``:
        whose call it was (a failure counts once per task in the window; None: each counts)."""
        return await self._send(oks=int(ok), fails=int(not ok), probe=probe, down=down, task=task)

    async def _send(
        self, *, oks: int, fails: int, probe: bool, down: bool = False, task: str | None = None
    ) -> BreakerState:
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
                int(down),
                task or "",
                self._config.down_after,
            ],
        )
        result = BreakerState(_text(state))
        if result is not BreakerState.CLOSED:
            self._closed_until = 0.0  # this worker sees its own opening at once
        return result

    async def state(self) -> BreakerState:
        raw = await self._redis.hget(self._keys.breaker, "state")
        return BreakerState(_text(raw)) if raw else BreakerState.CLOSED
