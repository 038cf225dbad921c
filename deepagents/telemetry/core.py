"""The telemetry of one process: metrics (or None when turned off) and tracing.

Objects that instrument (Orchestrator, Worker) take a ``Telemetry``; when given none they
use the process's, built on first use from what ``configure`` set (the CLI calls it once,
at start) or, never configured, metrics on and tracing from the host's global provider.
Nothing is read from the environment at import time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from deepagents.config.settings import Settings
from deepagents.telemetry.metrics import Metrics
from deepagents.telemetry.tracing import Tracing, setup_tracing


@dataclass
class Telemetry:
    metrics: Metrics | None = field(default_factory=Metrics)
    tracing: Tracing = field(default_factory=Tracing.from_global)

    @classmethod
    def from_settings(cls, settings: Settings, service: str) -> Telemetry:
        return cls(
            metrics=Metrics() if settings.metrics else None,
            tracing=setup_tracing(settings, service),
        )

    @classmethod
    def off(cls) -> Telemetry:
        return cls(metrics=None, tracing=Tracing(None))


_process: Telemetry | None = None


def configure(settings: Settings, service: str) -> Telemetry:
    """Set this process's telemetry from the settings (the CLI, once per process)."""
    global _process
    if _process is not None:
        _process.tracing.shutdown()
    _process = Telemetry.from_settings(settings, service)
    return _process


def process_telemetry() -> Telemetry:
    global _process
    if _process is None:
        _process = Telemetry()
    return _process
