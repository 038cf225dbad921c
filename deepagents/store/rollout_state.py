"""One agent's rollout as orchestrators, the controller and the CLI share it, and the
per-version figures the controller compares (docs/rollouts.md). Pure data: the Redis and
in-memory stores are ``store/rollouts.py`` and ``store/memory_rollouts.py``."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from typing import Any

import orjson

from deepagents.config.rollouts import RolloutConfig, StickyBy

# Phases: canary (a share goes to the canary), rolled_back (everything on stable, the
# canary's unstarted work moved there), promoted (the canary became stable), stable (no
# canary yet).
PHASES = ("canary", "rolled_back", "promoted", "stable")

# Outcomes are counted per version in buckets of this many seconds.
BUCKET_S = 5
# Upper bounds (ms) of the latency histogram the workers count into; p95 is read as the
# bound of the bucket holding the 95th percentile, so it is at most one bucket high.
LATENCY_BOUNDS_MS = (
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000,
)  # fmt: skip


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class RolloutState:
    agent: str
    stable: str
    canary: str | None
    weight: float
    sticky_by: str = StickyBy.TASK.value
    phase: str = "canary"
    # The version whose leftover unstarted tasks are still swept to stable (the canary
    # after a rollback, the old stable after a promotion).
    previous: str | None = None
    rev: int = 0
    since_ms: int = 0  # when the weight last changed (a promotion step's hold starts)
    unhealthy_since_ms: int | None = None  # the controller's for_s timer, kept for a new leader
    reason: str = ""
    updated_ms: int = 0
    by: str = ""

    @classmethod
    def initial(cls, agent: str, config: RolloutConfig) -> RolloutState:
        phase = "canary" if config.canary else "stable"
        at = now_ms()
        return cls(
            agent,
            config.stable,
            config.canary,
            config.weight if config.canary else 0.0,
            config.sticky_by.value,
            phase,
            since_ms=at,
            reason="from the configuration",
            updated_ms=at,
            by="config",
        )

    @property
    def versions(self) -> tuple[str, ...]:
        return tuple(v for v in (self.stable, self.canary) if v)

    def change(self, *, by: str, reason: str, **fields: Any) -> RolloutState:
        at = now_ms()
        if "weight" in fields and fields["weight"] != self.weight:
            fields.setdefault("since_ms", at)
        return replace(self, **fields, by=by, reason=reason, updated_ms=at)

    def to_json(self) -> bytes:
        body = asdict(self)
        body.pop("rev")  # the store's own counter, beside the document
        return orjson.dumps(body)

    @classmethod
    def from_json(cls, raw: bytes | str, rev: int) -> RolloutState:
        """Raises ValueError for a document that is not a rollout; fields it does not know
        (written by a newer release) are ignored."""
        body = orjson.loads(raw)
        if not isinstance(body, dict):
            raise ValueError("a rollout document is a JSON object")
        known = {k: v for k, v in body.items() if k in cls.__dataclass_fields__}
        try:
            state = cls(**{**known, "rev": rev})
        except TypeError as exc:
            raise ValueError(f"a rollout document lacks a field: {exc}") from None
        if not isinstance(state.stable, str) or not isinstance(state.weight, int | float):
            raise ValueError("a rollout document needs a stable version and a weight")
        return state


@dataclass(frozen=True, slots=True)
class VersionWindow:
    """One version's committed outcomes over a window."""

    version: str
    samples: int
    errors: int
    p95_ms: float | None

    @property
    def error_rate(self) -> float:
        return self.errors / self.samples if self.samples else 0.0


def window_from_buckets(version: str, buckets: list[dict[str, int]]) -> VersionWindow:
    """Sum a window's buckets (fields ``n``, ``err``, ``h0``..``hN``) into its figures."""
    n = sum(b.get("n", 0) for b in buckets)
    err = sum(b.get("err", 0) for b in buckets)
    hist = [sum(b.get(f"h{i}", 0) for b in buckets) for i in range(len(LATENCY_BOUNDS_MS) + 1)]
    return VersionWindow(version, n, err, p95_of(hist))


def p95_of(hist: list[int]) -> float | None:
    total = sum(hist)
    if total == 0:
        return None
    rank, seen = 0.95 * total, 0
    for i, count in enumerate(hist):
        seen += count
        if seen >= rank:
            return float(LATENCY_BOUNDS_MS[i]) if i < len(LATENCY_BOUNDS_MS) else float("inf")
    return float("inf")


def latency_bucket(ms: float) -> int:
    for i, bound in enumerate(LATENCY_BOUNDS_MS):
        if ms <= bound:
            return i
    return len(LATENCY_BOUNDS_MS)


@dataclass(slots=True)
class Tally:
    """What one worker counted since its last flush, per bucket start (s)."""

    buckets: dict[int, dict[str, int]]

    def add(self, ok: bool, latency_ms: float, at_s: float) -> None:
        start = int(at_s) // BUCKET_S * BUCKET_S
        fields = self.buckets.setdefault(start, {})
        fields["n"] = fields.get("n", 0) + 1
        if not ok:
            fields["err"] = fields.get("err", 0) + 1
        h = f"h{latency_bucket(latency_ms)}"
        fields[h] = fields.get(h, 0) + 1

    def take(self) -> dict[int, dict[str, int]]:
        out, self.buckets = self.buckets, {}
        return out
