"""What every step of a delivery shares (``begin.py``, ``execution.py``, ``steps.py``,
``outcomes.py``, ``overdue.py``): one object made by the worker, passed to each step as it
is built, instead of the same dozen arguments to each."""

from __future__ import annotations

from dataclasses import dataclass

from deepagents.config.schema import AgentSettings, FileConfig
from deepagents.config.settings import Settings
from deepagents.contract.agent import AgentContract
from deepagents.contract.events import AuditEvent
from deepagents.telemetry.metrics import Metrics
from deepagents.transport.base import MessageBus
from deepagents.worker.encode import Encoder
from deepagents.worker.stats import WorkerStats


class EventSink:
    """Where a delivery's audit events go: to the outbox, with the script of the step that
    caused them. ``event_sink(False)`` takes none. A step asks ``wanted`` before building
    events that cost something to build; cheap ones it hands over as they are."""

    wanted = True

    def keep(self, events: list[AuditEvent]) -> list[AuditEvent]:
        """The events to send on with a step's script (a park, a commit, a dead letter)."""
        return events


class _NoEvents(EventSink):
    """The outbox is off: no step writes an audit event."""

    wanted = False

    def keep(self, events: list[AuditEvent]) -> list[AuditEvent]:
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
