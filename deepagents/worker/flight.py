"""A delivery in flight and its lifecycle: one state, changed only along allowed edges.

    BEGUN ──▶ RUNNING ──▶ HANDED ───▶ SETTLED      (a result, to the group commit)
      │          │──────▶ RESOLVING ─▶ SETTLED      (a retry or a dead letter, one script)
      │          │──────────────────▶ SETTLED      (crashed, or cancelled at shutdown)
      └──────────┴─▶ LOST ─▶ ...                   (another consumer owns the entry now)

A lost delivery was told to stop, but an agent may swallow the cancellation and finish:
its outcome still goes through an owner-checked script, which changes nothing.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from deepagents.contract.codec import Envelope
from deepagents.contract.task import utcnow
from deepagents.errors import DeepAgentsError
from deepagents.transport.base import StreamRef


class FlightState(enum.Enum):
    BEGUN = 0  # the begin script marked it running; its batch's task has not reached it
    RUNNING = 1  # its contract runs
    LOST = 2  # the heartbeat found another owner: stop, the other's outcome stands
    RESOLVING = 3  # a retry or dead-letter script is in the air
    HANDED = 4  # its result is with the group commit; its slot is free already
    SETTLED = 5  # over: out of the in-flight set, its slot free


_S = FlightState
ALLOWED: dict[FlightState, frozenset[FlightState]] = {
    _S.BEGUN: frozenset({_S.RUNNING, _S.LOST}),
    _S.RUNNING: frozenset({_S.LOST, _S.RESOLVING, _S.HANDED, _S.SETTLED}),
    _S.LOST: frozenset({_S.RESOLVING, _S.HANDED, _S.SETTLED}),
    _S.RESOLVING: frozenset({_S.SETTLED}),
    _S.HANDED: frozenset({_S.SETTLED}),
    _S.SETTLED: frozenset(),
}


class IllegalTransition(DeepAgentsError):
    """A delivery was moved along an edge its lifecycle does not have: a bug."""


@dataclass(slots=True)
class InFlight:
    stream: StreamRef
    entry_id: str
    envelope: Envelope
    deliveries: int
    # The asyncio task that runs it, shared with the deliveries of its batch until it
    # starts (``execution.Run.in_turn``), or its own: cancel it only once RUNNING.
    task: asyncio.Task[None] | None = None
    state: FlightState = FlightState.BEGUN
    started_at: datetime = field(default_factory=utcnow)
    # The fields its audit events share (``encode.py``), once one was built.
    context: dict[str, Any] | None = None
    # Enqueue to begin: the wait its started event and its Result report.
    queue_ms: int = 0
    # A suspect's, run with no other delivery beside it (``quarantine.py``): set when the
    # delivery settles. An ordinary delivery (None) leaves the quarantine then instead.
    settled: asyncio.Event | None = None
    # An earlier delivery recorded steps (the begin script says so): read them first.
    stepped: bool = False
    # Its task was cancelled while it ran (the cancel script answered it already): its run
    # stops, and its entry is acked as a duplicate rather than left for a reclaim.
    cancelled: bool = False
    # A task begun before (the begin script says so): when it first began (ms), its Result's
    # latency runs from there; and what its earlier deliveries spent on model calls outside
    # recorded steps, which its Result counts.
    first_ms: int = 0
    spent_tokens: int = 0
    spent_cost_usd: float = 0.0

    def move(self, to: FlightState) -> None:
        if to not in ALLOWED[self.state]:
            raise IllegalTransition(f"delivery {self.entry_id}: {self.state.name} -> {to.name}")
        self.state = to

    @property
    def resolving(self) -> bool:
        """Its outcome is being written (or was): too late to hand it back or cancel it."""
        return self.state in _OUTCOME


_OUTCOME = frozenset({_S.RESOLVING, _S.HANDED, _S.SETTLED})
