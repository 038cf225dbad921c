"""Garbage-collector settings for long-lived servers: keep start-up objects out of its
passes, and collect the young generation less often."""

from __future__ import annotations

import gc

# Young collections every 10,000 net allocations instead of 700. Every task allocates
# dozens of short-lived containers, so at the default the collector ran every few tasks,
# each pass walking everything young and alive: about 8% of a worker's CPU per task
# (bench_worker_inprocess, 3 pairs). The older generations keep their default ratios.
YOUNG_THRESHOLD = 10_000


def freeze_startup_heap() -> None:
    """Move every object alive now (modules, schemas, clients, the agent) out of the
    collector's view, and raise the young generation's threshold. A full collection
    otherwise walks them all: 20-50 ms on a small machine, a pause every request or task in
    flight waits out (p99 latency). Called once, by the process's owner, when start-up is
    done."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
