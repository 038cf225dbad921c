"""A worker's counters, read by tests and the stop log line."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


@dataclass(slots=True)
class WorkerStats:
    started: int = 0
    committed: int = 0
    duplicates: int = 0
    lost_ownership: int = 0
    retried: int = 0
    dead_lettered: int = 0
    failed: int = 0
    reclaimed: int = 0
    parked: int = 0  # deliveries that ended waiting for a person's reply
    by_status: dict[str, int] = field(default_factory=lambda: defaultdict(int))
