"""Group commit: finished tasks of one stream are committed together in one script call."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deepagents.errors import TransportError
from deepagents.transport.base import CommitItem, StreamRef, TaskQueue

# Called once per stream's batch after its flush, with the items' tokens and statuses (each
# None, and the error, when the commit failed for good). On the loop, never concurrently.
OnCommitted = Callable[[list[Any], Sequence[str | None], BaseException | None], None]

_Batch = list[tuple[CommitItem, Any]]


@dataclass(frozen=True, slots=True)
class CommitBounds:
    """How much the group commit takes at once and holds back: ``batch_size`` items per
    script call; ``backlog``, per tier, items handed over and not yet landed before that
    tier's readers wait; ``tier_rank`` orders the tiers whose streams flush first (0 first)."""

    batch_size: int = 200
    tier_rank: Mapping[str, int] = field(default_factory=dict)
    backlog: Mapping[str, int] = field(default_factory=dict)


UNBOUNDED = CommitBounds()  # batches of 200, no tier waits, no tier flushes first


class Committer:
    """Collects commits and flushes them per stream. A caller hands an item over with a
    token and goes on; ``on_committed`` gets the tokens and the items' statuses: no future
    and no wake-up per task, which is a measurable share of a fast task's cost.

    ``backlog`` bounds a tier's items handed over and not yet landed: its readers wait in
    ``room()`` beyond that, so a slow Redis slows reading rather than piling up commits, and
    one tier's backlog never holds up another tier's readers."""

    def __init__(
        self,
        bus: TaskQueue,
        group: str,
        consumer: str,
        on_committed: OnCommitted,
        bounds: CommitBounds = UNBOUNDED,
    ) -> None:
        self._rank = bounds.tier_rank
        self._limit = bounds.backlog
        self._backlog: dict[str, int] = defaultdict(int)
        self._room: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self._bus = bus
        self._group = group
        self._consumer = consumer
        self._on_committed = on_committed
        self._batch_size = bounds.batch_size
        self._queues: dict[StreamRef, _Batch] = defaultdict(list)
        self._wake = asyncio.Event()
        self._closed = False

    def put(self, stream: StreamRef, item: CommitItem, token: Any) -> None:
        self._queues[stream].append((item, token))
        self._backlog[stream.tier] += 1
        self._wake.set()

    async def room(self, tier: str) -> None:
        """Until the tier's backlog is under its bound (no bound: at once)."""
        limit = self._limit.get(tier)
        while limit is not None and self._backlog[tier] >= limit:
            self._room[tier].clear()
            await self._room[tier].wait()

    def _landed(self, tier: str, n: int) -> None:
        self._backlog[tier] -= n
        self._room[tier].set()  # waiters check the bound again

    async def run(self) -> None:
        """Flush until closed and drained; retries a batch while Redis is unreachable."""
        while not (self._closed and not any(self._queues.values())):
            await self._wake.wait()
            self._wake.clear()
            # Let every task that finished in this loop iteration join the batch.
            await asyncio.sleep(0)
            while (tier := self._most_urgent()) is not None:
                # Every waiting stream of the most urgent tier in one round trip; a lower
                # tier's streams go in a later one, so urgent commits never wait on a flood.
                batches = []
                for stream, queue in self._queues.items():
                    if queue and stream.tier == tier:
                        batches.append((stream, queue[: self._batch_size]))
                        del queue[: self._batch_size]
                await self._flush(batches)

    def _most_urgent(self) -> str | None:
        """The highest tier with commits waiting: urgent commits never queue behind a flood."""
        waiting = [s.tier for s, q in self._queues.items() if q]
        return min(waiting, key=lambda t: self._rank.get(t, 0), default=None)

    async def _flush(self, batches: list[tuple[StreamRef, _Batch]]) -> None:
        statuses: Sequence[Sequence[str | None]]
        error: BaseException | None = None
        delay = 0.05
        while True:
            try:
                statuses = await self._bus.commit_streams(
                    self._group,
                    self._consumer,
                    [(stream, [item for item, _ in batch]) for stream, batch in batches],
                )
                break
            except TransportError as exc:
                if not exc.retryable:  # every item of the flush fails with it
                    statuses, error = [[None] * len(batch) for _, batch in batches], exc
                    break
                # The commit script is all-or-nothing per task and owner-checked, so
                # running it again after an ambiguous failure is safe.
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        for (stream, batch), stream_statuses in zip(batches, statuses, strict=True):
            self._landed(stream.tier, len(batch))
            self._on_committed([token for _, token in batch], stream_statuses, error)

    def close(self) -> None:
        self._closed = True
        self._wake.set()
