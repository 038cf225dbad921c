"""Prometheus metrics of the gateway, and (through a bridge) those of its process: the
orchestrator's ``deepagents_tasks_submitted_total`` (see ``deepagents.telemetry``).

A registry per app rather than the global one, so several apps in one process (tests)
do not collide.

With ``--workers N`` the CLI sets ``PROMETHEUS_MULTIPROC_DIR`` before uvicorn starts its
processes: prometheus_client then keeps every counter and histogram in a file per process,
and ``/metrics``, whichever process answers, sums them all (``scrape_registry``). Without
it each process would export its own counts, and a scrape would show whichever process the
load balancer picked. In that mode only prometheus_client's own metric types are exported:
the worker-side task histograms (``FastHistogram``) keep their counts in process memory,
and the gateway never observes them anyway.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
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
        self.damaged_records = Counter(
            "deepagents_gateway_damaged_records",
            "Reads that met a damaged record in Redis (410 decode_error), by record: "
            "result, location, question",
            ["record"],
            registry=self.registry,
        )
        self.config_reloads = Counter(
            "deepagents_gateway_config_reloads",
            "Config file reloads (SIGHUP) by outcome: ok, or failed (the running config stays)",
            ["outcome"],
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


def scrape_registry(metrics: GatewayMetrics) -> CollectorRegistry:
    """What ``/metrics`` exports: this process's registry, or, when several processes serve
    (``PROMETHEUS_MULTIPROC_DIR`` set), the sum over all of them, read from their files."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not path:
        return metrics.registry
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
    return registry
