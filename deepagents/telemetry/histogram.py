"""A lock-free histogram for the per-task hot path.

prometheus_client's Histogram takes a lock and walks every bucket on each observation;
the worker observes three per task on one event-loop thread. This one does a
bisect and two additions, and builds the cumulative buckets only when scraped. A scrape
from the HTTP thread may see counts a few observations (one batch) ahead of the sum:
harmless, and the ``+Inf`` bucket always equals ``_count`` because both come from the same
snapshot.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

# 1 ms to 60 s: an urgent trade check and a long research summary on one scale.
TASK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class HistogramChild:
    __slots__ = ("_bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last slot is +Inf
        self.total = 0.0

    def observe(self, value: float) -> None:
        # bisect_left: a value equal to a bound belongs to that bound's bucket (le).
        self.counts[bisect_left(self._bounds, value)] += 1
        self.total += value

    def observe_many(self, values: Iterable[float]) -> None:
        counts, bounds, total = self.counts, self._bounds, 0.0
        for value in values:
            counts[bisect_left(bounds, value)] += 1
            total += value
        self.total += total


class FastHistogram(Collector):
    """A histogram family whose children are bound once and observed without locks."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        *,
        buckets: Sequence[float] = TASK_BUCKETS,
        registry: CollectorRegistry,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.buckets = tuple(float(b) for b in buckets)
        self._children: dict[tuple[str, ...], HistogramChild] = {}
        registry.register(self)

    def labels(self, *values: str) -> HistogramChild:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}")
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = HistogramChild(self.buckets)
        return child

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in list(self._children.items()):
            counts, total = list(child.counts), child.total
            running, cumulative = 0, []
            for bound, count in zip((*self.buckets, float("inf")), counts, strict=True):
                running += count
                cumulative.append((_le(bound), float(running)))
            family.add_metric(list(values), cumulative, total)
        yield family


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)
