"""Per-tenant admission, fleet-wide: refusals as problem documents. The token bucket and
the in-flight cap live in Redis (``store/tenant_limits.py``), shared by every process."""

from __future__ import annotations

import contextlib
import itertools
import secrets
from collections.abc import AsyncIterator, Sequence

from deepagents.config.gateway import GatewayConfig
from deepagents.errors import ErrorCode, TransportError
from deepagents.gateway.problems import Problem
from deepagents.store.tenant_limits import Ask, TenantLimiter


class Admission:
    """The limits of ``gateway.tenants`` as HTTP answers (429 with Retry-After, 503)."""

    def __init__(self, limiter: TenantLimiter, config: GatewayConfig) -> None:
        self.limiter = limiter
        self.config = config
        # In-flight slot ids: unique among every process's (a random prefix per process)
        # without a uuid4 per request (a system call and a UUID object each).
        self._slots_prefix = secrets.token_hex(8) + ":"
        self._slots = itertools.count()

    async def aclose(self) -> None:
        await self.limiter.aclose()

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
        slot = f"{self._slots_prefix}{next(self._slots):x}"
        ask = Ask(
            rate_per_s=limits.rate_per_s,
            burst=limits.burst,
            cost=cost,
            max_in_flight=limits.max_in_flight,
            slot=slot,
            lease_ms=int(self.config.request_lease_s * 1000),
        )
        try:
            verdict, retry_ms = await self.limiter.acquire(tenant, ask, claims, claim_ttl_s)
        except TransportError as exc:
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
            await self.limiter.release(tenant, slot)
