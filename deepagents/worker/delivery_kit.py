"""What every step of a delivery shares (``begin.py``, ``execution.py``, ``steps.py``,
``outcomes.py``, ``overdue.py``): one object made by the worker, passed to each step as it
is built, instead of the same dozen arguments to each."""

from __future__ import annotations

from dataclasses import dataclass

from deepagents.config.schema import AgentSettings, FileConfig
from deepagents.config.settings import Settings
from deepagents.contract.agent import AgentContract
from deepagents.contract.event_sink import EventSink
from deepagents.telemetry.metrics import Metrics
from deepagents.transport.base import MessageBus
from deepagents.worker.encode import Encoder
from deepagents.worker.stats import WorkerStats


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
