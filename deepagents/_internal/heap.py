"""Keep start-up objects out of the garbage collector's passes (for long-lived servers)."""

from __future__ import annotations

import gc

# Allocations (net of frees) between young-generation passes; CPython's default is 700.
# A worker's per-task objects are freed by reference counting, not by the collector, yet
# every 700 of them triggered a pass, a measurable share of the worker's cost per task
# (``loadtests/bench_instructions.py``, docs/benchmarks.md). Cycles wait a little longer.
YOUNG_THRESHOLD = 10_000


def freeze_startup_heap() -> None:
    """Move every object made so far (modules, schemas, clients, the agent) out of the
    collector's view. A full collection otherwise walks them all: 20-50 ms on a small
    machine, a pause every request or task in flight waits out (p99 latency). Called once,
    by the process's owner, when start-up is done; also spaces the young passes out.

    No collection first: at this point it walks about 67,000 objects to free about 1,400
    (a worker's start-up garbage: argparse's parser, the classes ``slots=True`` replaces,
    import-time tracebacks; about 270 KiB), and took 33-70 ms of a worker's 400-480 ms start
    (docs/benchmarks.md). Those few are frozen with the rest and kept for the process's
    life instead."""
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
