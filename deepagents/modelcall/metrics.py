"""Prometheus metrics of model calls. Labels are bounded: configured model names, an agent
name, and outcomes from a fixed set; never a prompt, a key or a request id."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from deepagents.modelcall.record import AttemptRecord


class ModelMetrics:
    """Defined once per registry; pass ``prometheus_client.REGISTRY`` to export them."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        labels = ("model", "agent")
        self.attempts = Counter(
            "deepagents_model_attempts",
            "Model call attempts by outcome",
            (*labels, "outcome"),
            registry=self.registry,
        )
        self.retries = Counter(
            "deepagents_model_retries",
            "Attempts that were retries",
            labels,
            registry=self.registry,
        )
        self.tokens = Counter(
            "deepagents_model_tokens",
            "Tokens by direction (in/out)",
            (*labels, "direction"),
            registry=self.registry,
        )
        self.cost = Counter(
            "deepagents_model_cost_usd",
            "Cost from the price table, USD",
            labels,
            registry=self.registry,
        )
        self.latency = Histogram(
            "deepagents_model_latency_seconds",
            "Attempt latency (total)",
            labels,
            registry=self.registry,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )

    def observe(self, record: AttemptRecord, agent: str) -> None:
        self.attempts.labels(record.model, agent, record.outcome).inc()
        if record.attempt == 0:
            return  # refused by a gate: no tokens, no latency
        if record.retries:
            self.retries.labels(record.model, agent).inc()
        self.tokens.labels(record.model, agent, "in").inc(record.tokens_in)
        self.tokens.labels(record.model, agent, "out").inc(record.tokens_out)
        self.cost.labels(record.model, agent).inc(record.cost_usd)
        if record.total_ms is not None:
            self.latency.labels(record.model, agent).observe(record.total_ms / 1000)
