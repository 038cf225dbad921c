"""Prometheus metrics of the gateway, and (through a bridge) those of its process: the
orchestrator's ``deepagents_tasks_submitted_total`` (see ``deepagents.telemetry``).

A registry per app rather than the global one, so several apps in one process (tests)
do not collide. With ``--workers N`` each process exports its own series.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from deepagents.telemetry.core import process_telemetry


class _Bridge(Collector):
    """Exposes another registry's metrics through this one, read at scrape time."""

    def __init__(self, source: CollectorRegistry) -> None:
        self.source = source

    def collect(self) -> Iterable[Metric]:
        return self.source.collect()

    def describe(self) -> Iterable[Metric]:
        return []  # nothing to check for duplicates: the names are the source's own


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "deepagents_gateway_requests",
            "HTTP requests by route template, method and status",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "deepagents_gateway_request_seconds",
            "HTTP request latency by route template",
            ["route"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.problems = Counter(
            "deepagents_gateway_problems",
            "Error responses by problem code",
            ["code"],
            registry=self.registry,
        )
        self.submitted = Counter(
            "deepagents_gateway_tasks_submitted",
            "Tasks accepted through the gateway by tenant and agent",
            ["tenant", "agent"],
            registry=self.registry,
        )
        process = process_telemetry().metrics
        if process is not None:
            self.registry.register(_Bridge(process.registry))
