"""Coarse time limits for many short awaits, checked by one task instead of a timer each.

``asyncio.timeout`` arms a timer per use: a ``Timeout``, a ``TimerHandle`` pushed on the
loop's heap, its cancellation and the heap's clean-up: around every Redis round trip of
the bus's own connections, a measurable share of a lone ``Orchestrator.submit``'s cost
(``docs/benchmarks.md``). Those limits are safety nets against a server that
stopped answering, seconds long and almost never reached, so a check a few times per limit
is as good: an await times out between its limit and a tick (a quarter of the smallest
limit, at most a second) after it.

The checker is one task per ``Deadlines``, started at the first limit set in a running
loop (again in a new loop), and cancelled by ``aclose()``.
"""

from __future__ import annotations

import asyncio
import contextlib

_TICK_MAX_S = 1.0


class Deadlines:
    def __init__(self) -> None:
        self._due: dict[asyncio.Task[object], float] = {}
        self._expired: set[asyncio.Task[object]] = set()
        self._tick = _TICK_MAX_S
        self._checker: asyncio.Task[None] | None = None

    def start(self, limit_s: float) -> asyncio.Task[object]:
        """Bound the current task's await that follows by ``limit_s``; the caller ends it
        with ``end()`` and asks ``expired()`` when the await raised ``CancelledError``."""
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("Deadlines.start outside a task")
        loop = task.get_loop()
        self._due[task] = loop.time() + limit_s
        if limit_s / 4 < self._tick:
            self._tick = limit_s / 4
        checker = self._checker
        if checker is None or checker.done() or checker.get_loop() is not loop:
            self._checker = loop.create_task(self._check(), name="deadlines")
        return task

    def expired(self, task: asyncio.Task[object]) -> bool:
        """After ``CancelledError`` in the bounded await: whether the limit cancelled it and
        nothing else did too (then the await timed out; else the cancellation stands)."""
        if task not in self._expired:
            return False
        self._expired.discard(task)
        return task.uncancel() == 0

    def end(self, task: asyncio.Task[object]) -> None:
        self._due.pop(task, None)
        self._expired.discard(task)

    async def _check(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self._tick)
            now = loop.time()
            for task, due in list(self._due.items()):
                if due <= now and task not in self._expired:
                    self._expired.add(task)
                    task.cancel()

    async def aclose(self) -> None:
        checker, self._checker = self._checker, None
        if checker is None or checker.done():
            return
        checker.cancel()
        if checker.get_loop() is asyncio.get_running_loop():
            with contextlib.suppress(asyncio.CancelledError):
                await checker
