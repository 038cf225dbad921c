"""Pre-call gates kept in Redis, shared by every worker: circuit breaker, budget and quota.

Each gate is one Lua script on the model's hash slot (the budget's is in
``store.models.budget``), timed by Redis ``TIME`` so workers with skewed clocks still agree
on windows and cool-downs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from redis.asyncio import Redis

from deepagents.config.models import BreakerConfig, LimitsConfig
from deepagents.store.models.budget import BudgetLedger, Hold, Scope
from deepagents.store.models.keys import ModelKeys, safe_part


def micro_usd(cost: float) -> int:
    """Dollars as the integer micro-dollars the budget counters hold."""
    return round(cost * 1_000_000)


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

    def __init__(self, redis: Redis, keys: ModelKeys, config: BreakerConfig) -> None:
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


def _limit(value: float | int | None, scale: int = 1) -> int:
    return -1 if value is None else round(value * scale)


def _scope(prefix: str, budget_usd: float | None, requests: int | None, reason: str) -> Scope:
    return Scope(prefix, _limit(budget_usd, 1_000_000), _limit(requests), reason)


class Budget:
    """Daily cost budgets and request quotas, per model, tenant and agent (UTC days).

    ``reserve`` holds a call's worst-case cost against every budget before the call;
    ``settle`` replaces the hold with the actual cost (the ledger is ``store.models.budget``).
    """

    def __init__(self, redis: Redis, keys: ModelKeys, limits: LimitsConfig) -> None:
        self._keys = keys
        self._limits = limits
        self._ledger = BudgetLedger(redis)

    @staticmethod
    def today() -> str:
        return datetime.now(UTC).strftime("%Y%m%d")

    @property
    def active(self) -> bool:
        lim = self._limits
        return any(
            v is not None
            for v in (
                lim.daily_budget_usd,
                lim.daily_requests,
                lim.tenant_daily_budget_usd,
                lim.tenant_daily_requests,
                lim.agent_daily_budget_usd,
                lim.agent_daily_requests,
            )
        )

    def _scopes(self, tenant: str | None, agent: str) -> list[Scope]:
        lim = self._limits
        scopes = [_scope("", lim.daily_budget_usd, lim.daily_requests, "")]
        if tenant:
            scopes.append(
                _scope(
                    f"t:{safe_part(tenant)}:",
                    lim.tenant_daily_budget_usd,
                    lim.tenant_daily_requests,
                    "tenant_",
                )
            )
        if lim.agent_daily_budget_usd is not None or lim.agent_daily_requests is not None:
            scopes.append(
                _scope(
                    f"a:{safe_part(agent)}:",
                    lim.agent_daily_budget_usd,
                    lim.agent_daily_requests,
                    "agent_",
                )
            )
        return scopes

    async def reserve(
        self, tenant: str | None, agent: str, worst_usd: float, hold_s: float
    ) -> Hold | str | None:
        """Hold ``worst_usd`` and one request in every budget; the reason if one is full.
        ``None`` when no budget is configured (nothing to settle)."""
        if not self.active:
            return None
        return await self._ledger.reserve(
            self._keys.day(self.today()), self._scopes(tenant, agent), micro_usd(worst_usd), hold_s
        )

    async def extend(
        self, hold: Hold, tenant: str | None, agent: str, extra_usd: float
    ) -> Hold | str:
        """Grow a hold by ``extra_usd`` (a retry after billed partial output needs both)."""
        grown = await self._ledger.extend(hold, self._scopes(tenant, agent), micro_usd(extra_usd))
        return "deadline" if grown == "gone" else grown  # only an overdue hold expires

    async def settle(self, hold: Hold | None, spent_usd: float, requests: int) -> None:
        if hold is not None:
            await self._ledger.settle(hold, micro_usd(spent_usd), requests)

    async def spent_usd(self, tenant: str | None = None) -> float:
        field = f"t:{safe_part(tenant)}:spend" if tenant else "spend"
        return await self._ledger.field(self._keys.day(self.today()), field) / 1_000_000
