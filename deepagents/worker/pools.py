"""Per-tier concurrency pools: a flood in one tier never takes another tier's slots."""

from __future__ import annotations

import asyncio
import contextlib


class TierPool:
    """Counts slots; a reader takes slots before it reads, so it never reads more than it runs."""

    def __init__(self, name: str, capacity: int) -> None:
        self.name = name
        self.capacity = capacity
        self.in_use = 0  # slots taken: running tasks plus what readers hold while they read
        self.active = 0  # tasks of this tier started and not over (running or committing)
        self._freed = asyncio.Event()
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

    def try_take(self, most: int) -> int:
        n = max(0, min(most, self.free))
        self.in_use += n
        return n

    async def take(self, most: int) -> int:
        """Wait for at least one free slot; take up to ``most``."""
        while self.free <= 0:
            self._freed.clear()
            await self._freed.wait()
        return self.try_take(most)

    def release(self, n: int = 1) -> None:
        if n <= 0:
            return
        self.in_use -= n
        if self.in_use < 0:
            raise RuntimeError(f"tier pool {self.name} released more slots than taken")
        self._freed.set()
