"""How long each tenant may have this process spend parsing its bodies.

Parsing runs before the tenant's token bucket sees the request, with Python hooks for the
strictness checks: on the order of 0.1-1 s per MiB of small values, depending on the
machine. Without a budget, one tenant's stream of large bodies, valid or not, stalled
every other tenant's requests, and a body that failed validation cost its sender nothing.

The budget is a token bucket of parse seconds per tenant: a parse may start only while
the tenant is not in debt, and the time it took is taken afterwards. Wall time, not the
thread's CPU time: a parse holds the GIL even while the OS has descheduled its thread (a
loaded machine), and all that time is lost to every other request. Bytes would be a poor
proxy: the cost of a byte varies tenfold with the machine and the shape of the JSON.

It is per process on purpose: what it protects is this process's event loop, and checking
it costs no round trip to Redis.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from deepagents.config.gateway import BodyLimits
from deepagents.errors import ErrorCode
from deepagents.gateway.body import parse_json
from deepagents.gateway.problems import Problem

T = TypeVar("T")


class ParseBudget:
    def __init__(self) -> None:
        # Parses run on the event loop and in the parse thread: the read-modify-write of a
        # bucket must not interleave.
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # tenant -> (seconds left, as of)

    def parse(self, tenant: str, body: bytes, limits: BodyLimits) -> Any:
        """``parse_json`` on the tenant's budget; 429 while the tenant is in debt."""
        self.check(tenant, limits)  # again: queued parses may have spent the budget since
        start = time.perf_counter()
        try:
            return parse_json(body, limits)
        finally:
            self._spend(tenant, time.perf_counter() - start, limits)

    def run(self, tenant: str, work: Callable[[], T], limits: BodyLimits) -> T:
        """Other body work (a reply's check against its question's schema) on the same
        budget: 429 while the tenant is in debt, then the time it took is taken."""
        self.check(tenant, limits)
        start = time.perf_counter()
        try:
            return work()
        finally:
            self._spend(tenant, time.perf_counter() - start, limits)

    def check(self, tenant: str, limits: BodyLimits) -> None:
        """429 while the tenant is in debt; called before its body is even read."""
        with self._lock:
            left = self._refilled(tenant, limits)
        if left <= 0:
            raise Problem(
                ErrorCode.RATE_LIMITED,
                f"tenant {tenant!r} has used its share of this gateway process's time for "
                f"parsing ({limits.parse_cpu_per_s:g} s/s); wait Retry-After seconds or "
                "send smaller bodies",
                retry_after_s=-left / limits.parse_cpu_per_s,
            )

    def _spend(self, tenant: str, seconds: float, limits: BodyLimits) -> None:
        with self._lock:
            self._buckets[tenant] = (self._refilled(tenant, limits) - seconds, time.monotonic())

    def _refilled(self, tenant: str, limits: BodyLimits) -> float:
        now = time.monotonic()
        left, since = self._buckets.get(tenant, (limits.parse_cpu_burst_s, now))
        left = min(limits.parse_cpu_burst_s, left + (now - since) * limits.parse_cpu_per_s)
        self._buckets[tenant] = (left, now)
        return left
