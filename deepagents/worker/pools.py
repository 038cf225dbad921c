"""Per-tier concurrency pools: a flood in one tier never takes another tier's slots."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque


class TierPool:
    """Counts slots; a reader takes slots before it reads, so it never reads more than it runs."""

    def __init__(self, name: str, capacity: int) -> None:
        self.name = name
        self.capacity = capacity
        self.in_use = 0  # slots taken: running tasks plus what readers hold while they read
        self.active = 0  # tasks of this tier started and not over (running or committing)
        self._waiters: deque[asyncio.Future[None]] = deque()  # readers waiting, in order
        self._woken: asyncio.Future[None] | None = None  # the one told a slot is free
        self._idle = asyncio.Event()
        self._idle.set()

    def started(self, n: int = 1) -> None:
        if n:
            self.active += n
            self._idle.clear()

    def finished(self, n: int = 1) -> None:
        self.active -= n
        if self.active == 0:
            self._idle.set()

    async def wait_idle(self, timeout: float) -> None:
        """Until no task of this tier runs, or ``timeout`` passes."""
        if self.active:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), timeout)

    @property
    def free(self) -> int:
        return self.capacity - self.in_use

    @property
    def waiting(self) -> int:
        """Readers waiting for a slot (cancelled ones not yet out of the line included)."""
        return len(self._waiters) + (self._woken is not None)

    def try_take(self, most: int) -> int:
        n = max(0, min(most, self.free))
        self.in_use += n
        return n

    async def take(self, most: int) -> int:
        """Wait for at least one free slot; take up to ``most``. First come, first served:
        a reader that gives its slots back and asks again at once queues behind the readers
        already waiting. Otherwise the readers of idle shards, each blocking on its stream
        with its share of the slots, hand them back and take them again, and the reader of
        the one shard with a task queued never gets a slot while the tier runs tasks."""
        if self._waiters or self._woken is not None or self.free <= 0:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            self._wake_next()
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter is self._woken:  # told, but gone: the next in line is told instead
                    self._woken = None
                    self._wake_next()
                else:  # still in line, unless a release skipped it as cancelled
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
                raise
            self._woken = None
        n = self.try_take(most)  # at least one: nobody else took since this was told
        self._wake_next()  # what is left goes to the next in line
        return n

    def release(self, n: int = 1) -> None:
        if n <= 0:
            return
        self.in_use -= n
        if self.in_use < 0:
            raise RuntimeError(f"tier pool {self.name} released more slots than taken")
        self._wake_next()

    def _wake_next(self) -> None:
        """Tell the first waiting reader a slot is free, one at a time: no one takes a slot
        between the telling and its taking (``take`` queues everyone behind it)."""
        while self._woken is None and self._waiters and self.free > 0:
            waiter = self._waiters.popleft()
            if not waiter.done():  # a cancelled reader's, not yet out of the line
                self._woken = waiter
                waiter.set_result(None)
