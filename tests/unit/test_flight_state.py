"""A delivery's lifecycle is one state with fixed edges (``worker/flight.py``): every edge
the worker uses is allowed, every other one raises."""

from __future__ import annotations

import itertools

import pytest

from deepagents.contract import Task
from deepagents.contract.codec import Envelope
from deepagents.transport.base import StreamRef
from deepagents.transport.keys import Keys
from deepagents.worker.flight import ALLOWED, FlightState, IllegalTransition, InFlight

S = FlightState
# Every edge the delivery steps take, and no other.
EDGES = {
    (S.BEGUN, S.RUNNING),  # its batch's task reaches it (execution.py)
    (S.BEGUN, S.LOST),  # the heartbeat found another owner first, or shutdown
    (S.RUNNING, S.LOST),  # the heartbeat found another owner while it ran
    (S.RUNNING, S.HANDED),  # a result, to the group commit (outcomes.py)
    (S.RUNNING, S.RESOLVING),  # a retry or dead-letter script
    (S.RUNNING, S.SETTLED),  # crashed, or cancelled at shutdown
    (S.LOST, S.HANDED),  # the agent swallowed the cancellation: owner-checked anyway
    (S.LOST, S.RESOLVING),
    (S.LOST, S.SETTLED),
    (S.RESOLVING, S.SETTLED),
    (S.HANDED, S.SETTLED),  # its commit landed (settle.py)
}


def _flight() -> InFlight:
    task = Task(intent="x", payload={})
    ref = StreamRef(Keys("t").shard("agent", 0), "p1")
    return InFlight(ref, "1-1", Envelope(task, attempt=1, enqueued_ms=0), 1)


def _at(state: FlightState) -> InFlight:
    """A flight brought to ``state`` along allowed edges only."""
    path = {
        S.BEGUN: [],
        S.RUNNING: [S.RUNNING],
        S.LOST: [S.LOST],
        S.RESOLVING: [S.RUNNING, S.RESOLVING],
        S.HANDED: [S.RUNNING, S.HANDED],
        S.SETTLED: [S.RUNNING, S.SETTLED],
    }[state]
    flight = _flight()
    for step in path:
        flight.move(step)
    assert flight.state is state
    return flight


def test_a_flight_begins_begun() -> None:
    assert _flight().state is S.BEGUN


@pytest.mark.parametrize(("old", "new"), sorted(EDGES, key=str))
def test_each_edge_the_steps_take_is_allowed(old: FlightState, new: FlightState) -> None:
    flight = _at(old)
    flight.move(new)
    assert flight.state is new


@pytest.mark.parametrize(
    ("old", "new"),
    sorted(set(itertools.product(S, S)) - EDGES, key=str),
)
def test_every_other_edge_raises_and_leaves_the_state(old: FlightState, new: FlightState) -> None:
    flight = _at(old)
    with pytest.raises(IllegalTransition, match=f"{old.name} -> {new.name}"):
        flight.move(new)
    assert flight.state is old


def test_the_table_is_the_edges() -> None:
    assert {(a, b) for a, targets in ALLOWED.items() for b in targets} == EDGES


def test_only_an_outcome_in_the_air_or_written_is_resolving() -> None:
    assert {s for s in S if _at(s).resolving} == {S.RESOLVING, S.HANDED, S.SETTLED}
