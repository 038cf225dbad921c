"""What the rollout controller decides from one look at the figures: pure, so every branch
is tested without a fleet (docs/rollouts.md, "The controller")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from deepagents.config.rollouts import RolloutConfig
from deepagents.store.rollout_state import RolloutState, VersionWindow


@dataclass(frozen=True, slots=True)
class Decision:
    # wait (too few samples), healthy (hold: the step's time not up), promote, complete
    # (the last step), slow (p95 over its bound: no promotion), unhealthy (error rate over
    # its bound, the for_s timer running), rollback
    kind: str
    reason: str
    figures: dict[str, Any] = field(default_factory=dict)
    weight: float | None = None  # the new weight, for promote
    unhealthy_since_ms: int | None = None


def figures(stable: VersionWindow, canary: VersionWindow, baseline: float) -> dict[str, Any]:
    def one(w: VersionWindow) -> dict[str, Any]:
        return {
            "version": w.version,
            "samples": w.samples,
            "errors": w.errors,
            "error_rate": round(w.error_rate, 6),
            "p95_ms": w.p95_ms,
        }

    return {"stable": one(stable), "canary": one(canary), "baseline_error_rate": baseline}


def decide(
    state: RolloutState,
    config: RolloutConfig,
    stable: VersionWindow,
    canary: VersionWindow,
    now_ms: int,
) -> Decision:
    """One tick's decision for a rollout in its canary phase."""
    # Stable's rate, floored: with few samples or none failing, a single canary error
    # must not read as an infinite ratio.
    measured = stable.error_rate if stable.samples >= config.min_samples else 0.0
    baseline = max(measured, config.min_error_rate)
    facts = figures(stable, canary, baseline)
    facts["weight"] = state.weight
    if canary.samples < config.min_samples:
        return Decision(
            "wait",
            f"{canary.samples} canary samples in the window, {config.min_samples} needed",
            facts,
            unhealthy_since_ms=state.unhealthy_since_ms,
        )
    bound = config.max_error_ratio * baseline
    if canary.error_rate > bound:
        since = state.unhealthy_since_ms or now_ms
        held = (now_ms - since) / 1000
        facts.update(error_bound=bound, unhealthy_for_s=held)
        why = (
            f"canary error rate {canary.error_rate:.2%} > {config.max_error_ratio} x "
            f"{baseline:.2%} for {held:.1f} s"
        )
        if held >= config.for_s:
            return Decision("rollback", why, facts, unhealthy_since_ms=None)
        return Decision("unhealthy", why, facts, unhealthy_since_ms=since)
    if (
        canary.p95_ms is not None
        and stable.p95_ms is not None
        and canary.p95_ms > config.max_p95_ratio * stable.p95_ms
    ):
        return Decision(
            "slow",
            f"canary p95 {canary.p95_ms} ms > {config.max_p95_ratio} x stable's "
            f"{stable.p95_ms} ms: not promoted",
            facts,
        )
    held = (now_ms - state.since_ms) / 1000
    if held < config.step_s:
        return Decision("healthy", f"healthy; {held:.1f} of {config.step_s} s at this step", facts)
    weight = next((s for s in config.steps if s > state.weight), 1.0)
    kind = "complete" if weight >= 1.0 else "promote"
    return Decision(kind, f"healthy for {held:.1f} s at {state.weight:.0%}", facts, weight=weight)
