"""The daily budget ledger of model calls: spend and requests, with holds taken before a call.

A call holds its worst-case cost and one request in every scope it belongs to (the model,
its tenant, its agent) in one script, and is refused if any scope would pass its limit
counting what others hold: concurrent calls can therefore never together pass a budget.
Settling replaces the hold with what the call really cost. Holds are members of a sorted
set scored by their expiry, so the hold of a process that died is swept by the next
reservation instead of keeping the budget forever.

Fields of the day hash, per scope prefix (``''`` the model, ``t:<tenant>:``, ``a:<agent>:``):
``spend`` (µUSD), ``req``, ``held`` (µUSD held), ``hreq`` (requests held).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

# A hold's member: "<id>|<µUSD>|@<scope>,@<scope>..." ('@' marks a scope, so the model's
# empty prefix survives the split). Scope prefixes never contain '|' or ','.
_PARSE = """
local function parse(member)
  local amount, scopes = string.match(member, '^[^|]*|(%d+)|(.*)$')
  local out = {}
  for token in string.gmatch(scopes, '[^,]+') do table.insert(out, string.sub(token, 2)) end
  return tonumber(amount), out
end
local function unhold(member)
  local amount, scopes = parse(member)
  for _, f in ipairs(scopes) do
    redis.call('HINCRBY', KEYS[1], f .. 'held', 0 - amount)  -- never -0
    redis.call('HINCRBY', KEYS[1], f .. 'hreq', -1)
  end
end
local function num(field) return tonumber(redis.call('HGET', KEYS[1], field) or '0') end
"""

# KEYS: day hash, holds zset (one hash tag). ARGV: member, µUSD, hold_ms, key_ttl_s, then
# per scope: prefix, budget µUSD, requests (-1 = unlimited), reason prefix.
# Returns 'ok' or the refusal reason.
_RESERVE = (
    _PARSE
    + """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)) do
  unhold(member)
  redis.call('ZREM', KEYS[2], member)
end
local cost = tonumber(ARGV[2])
for i = 5, #ARGV, 4 do
  local f, budget, reqs = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  if budget >= 0 then
    local used = num(f .. 'spend') + num(f .. 'held')
    if used >= budget or used + cost > budget then return ARGV[i + 3] .. 'budget_exhausted' end
  end
  if reqs >= 0 and num(f .. 'req') + num(f .. 'hreq') + 1 > reqs then
    return ARGV[i + 3] .. 'quota_exhausted'
  end
end
for i = 5, #ARGV, 4 do
  redis.call('HINCRBY', KEYS[1], ARGV[i] .. 'held', cost)
  redis.call('HINCRBY', KEYS[1], ARGV[i] .. 'hreq', 1)
end
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[1])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[4]))
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[4]))
return 'ok'
"""
)

# KEYS: day hash, holds zset. ARGV: member, µUSD spent, requests made, key_ttl_s.
# A hold already swept (it outlived its expiry) is not released twice; the spend counts.
_SETTLE = (
    _PARSE
    + """
local _, scopes = parse(ARGV[1])
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then unhold(ARGV[1]) end
local cost, reqs = tonumber(ARGV[2]), tonumber(ARGV[3])
for _, f in ipairs(scopes) do
  if cost > 0 then redis.call('HINCRBY', KEYS[1], f .. 'spend', cost) end
  if reqs > 0 then redis.call('HINCRBY', KEYS[1], f .. 'req', reqs) end
end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[4]))
return 1
"""
)

# KEYS: day hash, holds zset. ARGV: member, new member, extra µUSD, then the scopes as for
# _RESERVE. Grows a live hold by ``extra`` if every budget allows it. Returns 'ok', the
# refusal reason, or 'gone' (the hold expired: nothing is held any more).
_EXTEND = (
    _PARSE
    + """
local expires = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not expires then return 'gone' end
local extra = tonumber(ARGV[3])
for i = 4, #ARGV, 4 do
  local f, budget = ARGV[i], tonumber(ARGV[i + 1])
  if budget >= 0 and num(f .. 'spend') + num(f .. 'held') + extra > budget then
    return ARGV[i + 3] .. 'budget_exhausted'
  end
end
for i = 4, #ARGV, 4 do redis.call('HINCRBY', KEYS[1], ARGV[i] .. 'held', extra) end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[2], expires, ARGV[2])
return 'ok'
"""
)

KEY_TTL_S = 2 * 86_400


@dataclass(frozen=True, slots=True)
class Scope:
    """One budget a call counts against; a limit of -1 means unlimited."""

    prefix: str  # field prefix in the day hash: '' (the model), 't:<tenant>:', 'a:<agent>:'
    budget_micro_usd: int
    requests: int
    reason: str  # prefix of the refusal reason: '', 'tenant_', 'agent_'


@dataclass(frozen=True, slots=True)
class Hold:
    day_key: str
    member: str


def holds_key(day_key: str) -> str:
    return f"{day_key}:held"


class BudgetLedger:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._reserve = redis.register_script(_RESERVE)
        self._settle = redis.register_script(_SETTLE)
        self._extend = redis.register_script(_EXTEND)

    async def reserve(
        self, day_key: str, scopes: Sequence[Scope], micro_usd: int, hold_s: float
    ) -> Hold | str:
        """Hold ``micro_usd`` and one request in every scope, or return why not."""
        member = f"{uuid.uuid4().hex}|{micro_usd}|" + ",".join(f"@{s.prefix}" for s in scopes)
        args: list[str | int] = [member, micro_usd, max(1, int(hold_s * 1000)), KEY_TTL_S]
        for scope in scopes:
            args += [scope.prefix, scope.budget_micro_usd, scope.requests, scope.reason]
        reason = await self._reserve(keys=[day_key, holds_key(day_key)], args=args)
        text = reason.decode() if isinstance(reason, bytes) else str(reason)
        return Hold(day_key, member) if text == "ok" else text

    async def extend(self, hold: Hold, scopes: Sequence[Scope], extra: int) -> Hold | str:
        """Grow ``hold`` by ``extra`` µUSD if every budget allows it, or return why not."""
        ident, amount, tail = hold.member.split("|", 2)
        grown = Hold(hold.day_key, f"{ident}|{int(amount) + extra}|{tail}")
        args: list[str | int] = [hold.member, grown.member, extra]
        for scope in scopes:
            args += [scope.prefix, scope.budget_micro_usd, scope.requests, scope.reason]
        reason = await self._extend(keys=[hold.day_key, holds_key(hold.day_key)], args=args)
        text = reason.decode() if isinstance(reason, bytes) else str(reason)
        return grown if text == "ok" else text

    async def settle(self, hold: Hold, micro_usd: int, requests: int) -> None:
        """Replace the hold with what the call spent (0, 0 releases it)."""
        await self._settle(
            keys=[hold.day_key, holds_key(hold.day_key)],
            args=[hold.member, max(0, micro_usd), max(0, requests), KEY_TTL_S],
        )

    async def field(self, day_key: str, name: str) -> int:
        raw = await self._redis.hget(day_key, name)
        return int(raw or 0)
