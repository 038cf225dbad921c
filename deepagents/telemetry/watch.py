"""Throughput and p95 per tier from two scrapes of the workers' /metrics (``status --watch``).

Pure functions over the text exposition format, parsed with prometheus_client's parser.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

COMPLETED = "deepagents_tasks_completed"
LATENCY = "deepagents_task_latency_seconds"


@dataclass
class Snapshot:
    """Counters summed over agents (and over every scraped worker), per tier."""

    at: float
    completed: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    buckets: dict[str, dict[float, float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float))
    )


def snapshot(texts: list[str], at: float) -> Snapshot:
    snap = Snapshot(at)
    for text in texts:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                tier = s.labels.get("tier")
                if tier is None:
                    continue
                if family.name == COMPLETED and s.name.endswith("_total"):
                    snap.completed[tier] += s.value
                elif family.name == LATENCY and s.name.endswith("_bucket"):
                    snap.buckets[tier][float(s.labels["le"])] += s.value
    return snap


def throughput(before: Snapshot, after: Snapshot) -> dict[str, float]:
    """Tasks finished per second per tier between the two snapshots."""
    span = max(1e-9, after.at - before.at)
    return {
        tier: max(0.0, n - before.completed.get(tier, 0.0)) / span
        for tier, n in after.completed.items()
    }


def p95(before: Snapshot, after: Snapshot) -> dict[str, float | None]:
    """Latency p95 per tier over the interval (interpolated within a bucket, as Prometheus's
    histogram_quantile does); None when nothing finished."""
    out: dict[str, float | None] = {}
    for tier, buckets in after.buckets.items():
        old = before.buckets.get(tier, {})
        delta = sorted((le, n - old.get(le, 0.0)) for le, n in buckets.items())
        out[tier] = quantile(0.95, delta)
    return out


def quantile(q: float, cumulative: list[tuple[float, float]]) -> float | None:
    if not cumulative or cumulative[-1][1] <= 0:
        return None
    rank = q * cumulative[-1][1]
    lower_le, lower_n = 0.0, 0.0
    for le, n in cumulative:
        if n >= rank:
            if math.isinf(le):
                return lower_le  # beyond the last finite bucket: its bound is all we know
            width = n - lower_n
            return lower_le + (le - lower_le) * ((rank - lower_n) / width if width else 1.0)
        lower_le, lower_n = le, n
    return None
