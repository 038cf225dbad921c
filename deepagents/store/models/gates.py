"""Pre-call gates kept in Redis, shared by every worker: circuit breaker, budget and quota.

Each gate is one Lua script on the model's hash slot (the budget's is in
``store.models.budget``, the breaker's in ``store.breaker``, which remote agents share),
timed by Redis ``TIME`` so workers with skewed clocks still agree on windows and cool-downs.
"""

from __future__ import annotations

from datetime import UTC, datetime

from redis.asyncio import Redis

from deepagents.config.models import LimitsConfig
from deepagents.store.breaker import SUCCESS_FLUSH_S, BreakerState, CircuitBreaker, Permit
from deepagents.store.models.budget import BudgetLedger, Hold, Scope
from deepagents.store.models.keys import ModelKeys, safe_part

__all__ = ["SUCCESS_FLUSH_S", "BreakerState", "Budget", "CircuitBreaker", "Permit", "micro_usd"]


def micro_usd(cost: float) -> int:
    """Dollars as the integer micro-dollars the budget counters hold."""
    return round(cost * 1_000_000)


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
