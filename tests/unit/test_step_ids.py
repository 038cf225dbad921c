"""Step ids and phase labels: the same ids on every delivery whatever the branches' timing, and
phase labels that stay bounded whatever an agent names its phases."""

from __future__ import annotations

import pytest

from deepagents.errors import StepError
from deepagents.telemetry.metrics import MAX_PHASES, Metrics
from deepagents.worker.step_ids import Branch, check_name


def test_a_repeated_name_counts_per_lane_and_forks_are_numbered() -> None:
    root = Branch()
    assert [root.next_id("fetch") for _ in range(3)] == ["fetch", "fetch#2", "fetch#3"]
    first, second = root.fork(2)
    # Each branch counts on its own: interleaving them changes no id.
    assert [second.next_id("s"), first.next_id("s"), second.next_id("s")] == [
        "g0.1#s",
        "g0.0#s",
        "g0.1#s#2",
    ]
    (again,) = root.fork(1)
    assert again.next_id("s") == "g1.0#s"
    (inner,) = first.fork(1)
    assert inner.next_id("s") == "g0.0#g0.0#s"


@pytest.mark.parametrize("name", ["", "a#b", "x" * 201, 7])
def test_a_step_name_is_short_text_without_the_separator(name: object) -> None:
    with pytest.raises(StepError, match="a step name is 1 to 200 characters"):
        check_name(name)


def test_phase_labels_are_bounded_per_agent() -> None:
    steps = Metrics().steps
    labels = [steps.phase("a", f"p{i}") for i in range(MAX_PHASES + 5)]
    assert labels[:MAX_PHASES] == [f"p{i}" for i in range(MAX_PHASES)]
    assert set(labels[MAX_PHASES:]) == {"other"}
    assert steps.phase("a", "p0") == "p0"  # one seen before keeps its label
    assert steps.phase("b", "p40") == "p40"  # another agent has its own budget
