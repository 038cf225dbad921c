"""Suspect deliveries run alone, so a task that kills its process takes no other with it.

A delivery is suspect when two earlier deliveries of its task vanished without an
outcome, because their process died (a segfault, the OOM killer, ``os._exit`` in a
library) or stalled past the visibility timeout. One is not enough: a worker that dies of
its own cause (a node lost) leaves every task it ran with one, and running them all one by
one would stall recovery. A graceful shutdown gives its delivery back (``hand_back.lua``),
so a deploy makes no suspect.

Every delivery running beside a process-killing task is charged a delivery when the
process dies. Run concurrently, a poison task would push the innocent tasks it crashed
with towards ``max_deliveries`` as fast as itself, and into the dead-letter stream with
it. So a suspect is begun and run with no other delivery beside it. An ordinary delivery
is in the quarantine from before its begin (which counts it) until it settles (its commit
landed). A suspect waits for those to settle (at most ``drain_s``; those still going then
are let be, and not waited for again), no ordinary delivery is begun meanwhile, and
suspects go one at a time. Reads and commits go on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

DRAIN_S = 10.0


Key = tuple[str, str]  # (stream, entry id) of an ordinary delivery


class Quarantine:
    def __init__(self, drain_s: float = DRAIN_S) -> None:
        self.drain_s = drain_s
        self._running: set[Key] = set()  # ordinary deliveries begun and not yet settled
        self._tolerated: set[Key] = set()  # still running after a drain gave up on them
        self._suspects = 0  # suspects waiting or running: ordinary deliveries wait for them
        self._suspect_running = False
        self._changed = asyncio.Event()

    def try_enter(self, keys: list[Key]) -> bool:
        """Ordinary deliveries about to be begun go in at once unless a suspect waits or
        runs (no await: this is per batch on the hot path)."""
        if self._suspects:
            return False
        self._running.update(keys)
        return True

    async def enter(self, keys: list[Key]) -> None:
        """Ordinary deliveries: wait while suspects wait or run (they go first)."""
        while self._suspects:
            await self._changed.wait()
        self._running.update(keys)

    def leave(self, *keys: Key) -> None:
        for key in keys:
            self._running.discard(key)
            self._tolerated.discard(key)
        if self._suspects:
            self._signal()

    @contextlib.asynccontextmanager
    async def alone(self) -> AsyncIterator[None]:
        """Begin and run a suspect inside: no other delivery is in flight beside it."""
        self._suspects += 1
        try:
            while self._suspect_running:
                await self._changed.wait()
            self._suspect_running = True
            await self._drain()
            yield
        finally:
            self._suspect_running = False
            self._suspects -= 1
            self._signal()

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.drain_s
        while self._running - self._tolerated:
            left = deadline - loop.time()
            if left <= 0:
                self._tolerated |= self._running  # not waited for by the next suspects
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)

    def _signal(self) -> None:
        # Wake every waiter once; each checks its condition again. A fresh event per change,
        # so a waiter that arrives later never sees a stale "set". Waiters bind the event
        # when they start waiting (``self._changed.wait()`` is evaluated then), so a change
        # between that and the wait's first step is not missed.
        self._changed.set()
        self._changed = asyncio.Event()
