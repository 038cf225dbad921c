"""Observability: Prometheus metrics, OpenTelemetry traces, structured logs.

See docs/observability.md. Import what you need from the submodules or from here.
"""

from deepagents.telemetry.core import Telemetry, configure, process_telemetry
from deepagents.telemetry.logs import configure_logging, current_task_id
from deepagents.telemetry.metrics import FleetMetrics, Metrics, catalogue
from deepagents.telemetry.modelcalls import ModelCallRecorder, record_attempt
from deepagents.telemetry.tracing import Tracing, extract, model_call_span, setup_tracing

__all__ = [
    "FleetMetrics",
    "Metrics",
    "ModelCallRecorder",
    "Telemetry",
    "Tracing",
    "catalogue",
    "configure",
    "configure_logging",
    "current_task_id",
    "extract",
    "model_call_span",
    "process_telemetry",
    "record_attempt",
    "setup_tracing",
]
