"""What every step of a delivery shares (``begin.py``, ``execution.py``, ``steps.py``,
``outcomes.py``, ``overdue.py``): one object made by the worker, passed to each step as it
is built, instead of the same dozen arguments to each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deepagents.config.schema import AgentSettings, FileConfig
from deepagents.config.settings import Settings
from deepagents.contract.agent import AgentContract
from deepagents.contract.events import encode_events
from deepagents.telemetry.metrics import Metrics
from deepagents.transport.base import MessageBus
from deepagents.worker.encode import Encoder
from deepagents.worker.stats import WorkerStats


class EventSink:
    """Where a delivery's audit events go: to the outbox, with the script of the step that
    caused them. ``event_sink(False)`` takes none. A step asks ``wanted`` before building
    events that cost something to build; cheap ones it hands over as they are."""

    wanted = True

    def encode(self, events: list[dict[str, Any]]) -> bytes:
        """The events as a step's script takes them."""
        return encode_events(events)

    def keep(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The events to send on with a later step (a park, a commit)."""
        return events


class _NoEvents(EventSink):
    """The outbox is off: no step writes an audit event."""

    wanted = False

    def encode(self, events: list[dict[str, Any]]) -> bytes:
        return b""

    def keep(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return []


def event_sink(outbox: bool) -> EventSink:
    return EventSink() if outbox else _NoEvents()


@dataclass(frozen=True, slots=True)
class DeliveryKit:
    agent: AgentContract
    agent_settings: AgentSettings
    config: FileConfig
    settings: Settings
    consumer: str
    bus: MessageBus
    stats: WorkerStats
    encoder: Encoder
    metrics: Metrics | None
    events: EventSink

    @property
    def group(self) -> str:
        """The consumer group of the agent's streams: the agent type's name."""
        return self.agent.name
