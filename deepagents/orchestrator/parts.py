"""A large ``submit_many`` batch, cut into parts of whole shards sent side by side.

One enqueue round trip leaves the two sides of a batch taking turns: the producer builds
every script call while Redis waits, then Redis runs them while the producer waits. Sent
as parts, each on its own connection, Redis runs the first part's scripts while the
producer builds the next (figures: ``docs/benchmarks.md``).

A shard's tasks stay in one part, sent on one connection in the order given, so the tasks
of one stream keep their order. A small batch stays whole: one round trip serves it better
than two.
"""

from __future__ import annotations

from collections.abc import Sequence

# Each part is a round trip more (about 2.8% more producer instructions per task for four
# parts of 125, against about 9% more tasks/s: docs/dev/benchmarks-history.md, "Session
# 29"), so a part carries at least this many tasks, and a batch makes a few parts at most.
PART_MIN = 64
PARTS_MAX = 4


def shard_parts(shards: Sequence[str]) -> list[list[int]]:
    """Positions of the batch's tasks (``shards[i]``: task i's shard), in at most
    ``PARTS_MAX`` parts of whole shards and at least ``PART_MIN`` tasks each but for the
    last, each in the batch's order. One part holding them all when the batch is small."""
    parts = min(PARTS_MAX, len(shards) // PART_MIN)
    if parts < 2:
        return [list(range(len(shards)))]
    by_shard: dict[str, list[int]] = {}
    for i, shard in enumerate(shards):
        by_shard.setdefault(shard, []).append(i)
    if len(by_shard) < 2:
        return [list(range(len(shards)))]
    out: list[list[int]] = [[]]
    share = len(shards) / parts
    for positions in by_shard.values():
        if len(out[-1]) >= share and len(out) < parts:
            out.append([])
        out[-1].extend(positions)
    return [sorted(part) for part in out]
