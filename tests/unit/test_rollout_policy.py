"""The rollout controller's decisions from one look at the figures (rollout_policy.decide),
every branch, and the rollouts section's errors (one line each)."""

from __future__ import annotations

import pytest

from deepagents.config.load import parse_config
from deepagents.config.rollouts import RolloutConfig
from deepagents.errors import ConfigError
from deepagents.orchestrator.rollout_policy import decide
from deepagents.store.rollout_state import RolloutState, VersionWindow, p95_of

CONFIG = RolloutConfig(stable="1.2.0", canary="1.3.0", min_samples=100, for_s=60, step_s=300)
NOW = 10_000_000


def _state(
    weight: float = 0.1, since_s: float = 0, unhealthy_s: float | None = None
) -> RolloutState:
    unhealthy = None if unhealthy_s is None else NOW - int(unhealthy_s * 1000)
    return RolloutState(
        "risk", "1.2.0", "1.3.0", weight, since_ms=NOW - int(since_s * 1000),
        unhealthy_since_ms=unhealthy,
    )  # fmt: skip


def _w(version: str, n: int, err: int, p95: float | None = 50.0) -> VersionWindow:
    return VersionWindow(version, n, err, p95)


def test_too_few_canary_samples_wait() -> None:
    d = decide(_state(), CONFIG, _w("1.2.0", 1000, 10), _w("1.3.0", 99, 50), NOW)
    assert d.kind == "wait"


def test_errors_over_twice_stable_start_the_timer_then_roll_back_after_for_s() -> None:
    stable, canary = _w("1.2.0", 1000, 20), _w("1.3.0", 200, 30)  # 2% vs 15%
    first = decide(_state(), CONFIG, stable, canary, NOW)
    assert first.kind == "unhealthy" and first.unhealthy_since_ms == NOW
    later = decide(_state(unhealthy_s=59), CONFIG, stable, canary, NOW)
    assert later.kind == "unhealthy"
    due = decide(_state(unhealthy_s=60), CONFIG, stable, canary, NOW)
    assert due.kind == "rollback"
    assert due.figures["canary"]["error_rate"] == 0.15
    assert due.figures["baseline_error_rate"] == 0.02


def test_errors_at_twice_stable_are_not_a_rollback() -> None:
    d = decide(_state(since_s=10), CONFIG, _w("1.2.0", 1000, 50), _w("1.3.0", 200, 20), NOW)
    assert d.kind == "healthy"  # 10% = 2 x 5%: not over the bound
    assert d.unhealthy_since_ms is None


def test_a_stable_with_no_errors_is_floored_at_min_error_rate() -> None:
    stable = _w("1.2.0", 1000, 0)
    assert decide(_state(), CONFIG, stable, _w("1.3.0", 200, 2), NOW).kind == "healthy"
    assert decide(_state(), CONFIG, stable, _w("1.3.0", 200, 5), NOW).kind == "unhealthy"


def test_a_slow_canary_is_not_promoted() -> None:
    d = decide(
        _state(since_s=1000), CONFIG, _w("1.2.0", 1000, 0, 100.0), _w("1.3.0", 200, 0, 250.0), NOW
    )
    assert d.kind == "slow"


def test_a_healthy_canary_is_promoted_to_the_next_step_after_step_s() -> None:
    stable, canary = _w("1.2.0", 1000, 10), _w("1.3.0", 200, 2)
    assert decide(_state(0.1, since_s=299), CONFIG, stable, canary, NOW).kind == "healthy"
    step = decide(_state(0.1, since_s=300), CONFIG, stable, canary, NOW)
    assert (step.kind, step.weight) == ("promote", 0.25)
    last = decide(_state(0.5, since_s=300), CONFIG, stable, canary, NOW)
    assert (last.kind, last.weight) == ("complete", 1.0)


def test_p95_is_the_bound_of_the_bucket_holding_it() -> None:
    assert p95_of([0] * 14) is None
    assert p95_of([94, 6] + [0] * 12) == 25.0
    assert p95_of([96, 4] + [0] * 12) == 10.0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('{stable: "1", canary: "1"}', "canary and stable are the same version"),
        ('{stable: "1.2{x"}', "version '1.2{x' must match"),
        ('{stable: "1", weight: 1.5}', "rollouts.risk.weight"),
        ('{stable: "1", steps: [0.5, 0.25, 1.0]}', "steps must increase"),
        ('{stable: "1", steps: [0.5]}', "the last step must be 1.0"),
        ('{stable: "1", sticky_by: user}', "rollouts.risk.sticky_by"),
    ],
)
def test_a_bad_rollouts_section_is_one_clear_line(body: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(f"agents: {{risk: {{}}}}\nrollouts: {{risk: {body}}}\n")
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_rollout_for_an_unknown_agent_is_refused() -> None:
    with pytest.raises(ConfigError, match="rollouts for unknown agents: nope"):
        parse_config('agents: {risk: {}}\nrollouts: {nope: {stable: "1"}}\n')
