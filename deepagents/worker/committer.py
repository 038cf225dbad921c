"""Group commit: finished tasks of one stream are committed together in one script call."""

from __future__ import annotations

import asyncio
from collections import defaultdict

from deepagents.errors import TransportError
from deepagents.transport.base import CommitItem, StreamRef
from deepagents.transport.redis_streams.bus import RedisStreamBus


class Committer:
    """Collects commits and flushes them per stream; each caller awaits its own status."""

    def __init__(
        self,
        bus: RedisStreamBus,
        group: str,
        consumer: str,
        batch_size: int = 200,
        tier_rank: dict[str, int] | None = None,
    ) -> None:
        self._rank = tier_rank or {}
        self._bus = bus
        self._group = group
        self._consumer = consumer
        self._batch_size = batch_size
        self._queues: dict[StreamRef, list[tuple[CommitItem, asyncio.Future[str]]]] = defaultdict(
            list
        )
        self._wake = asyncio.Event()
        self._closed = False

    async def commit(self, stream: StreamRef, item: CommitItem) -> str:
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._queues[stream].append((item, future))
        self._wake.set()
        return await future

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

    async def _flush(
        self, batches: list[tuple[StreamRef, list[tuple[CommitItem, asyncio.Future[str]]]]]
    ) -> None:
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
                if not exc.retryable:
                    for _, batch in batches:
                        for _, future in batch:
                            if not future.done():
                                future.set_exception(exc)
                    return
                # The commit script is all-or-nothing per task and owner-checked, so
                # running it again after an ambiguous failure is safe.
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        for (_, batch), stream_statuses in zip(batches, statuses, strict=True):
            for (_, future), status in zip(batch, stream_statuses, strict=True):
                if not future.done():
                    future.set_result(status)

    def close(self) -> None:
        self._closed = True
        self._wake.set()
