"""Prometheus metrics of the gateway (minimal; the observability work extends them).

A registry per app rather than the global one, so several apps in one process (tests)
do not collide. With ``--workers N`` each process exports its own series.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram


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
