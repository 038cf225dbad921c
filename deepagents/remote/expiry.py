"""Deadlines on futures rather than on the tasks awaiting them, one timer per deadline.

``asyncio.timeout`` around ``await asyncio.shield(future)`` costs a timeout scope, a shield
(an outer future and two callbacks) and a task cancellation per wait; the worker waits so
for every remote task. A timer that sets ``TimeoutError`` on the future itself ends the
wait the same way, and the future is done at once: whoever would answer it later (a batch,
a puller) sees that nobody waits any more.

A timer each and its cancel still cost about 1.1 µs a task with 1,000 waits in flight
(uvloop; ``loadtests/bench_answer_reading.py``: 0.6 here). Deadlines are
kept to the millisecond (uvloop's own timers are), rounded up: a busy worker begins its
deliveries in batches, all in one turn of the loop and with one timeout, so their futures
get the same deadline and share its timer.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any


class Expiries:
    """Owned by one object (a remote agent, a lease board), used in one event loop at a
    time: a new loop starts it afresh (the deadlines are the loop's clock)."""

    def __init__(self) -> None:
        # Keyed by the deadline in the loop's milliseconds.
        self._due: dict[int, set[asyncio.Future[Any]]] = {}
        self._timers: dict[int, asyncio.TimerHandle] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def add(self, future: asyncio.Future[Any], delay_s: float) -> int:
        """In ``delay_s`` (at most a millisecond later), unless it is done by then, end
        ``future`` with ``TimeoutError``. Returns its deadline, for ``discard`` once the
        wait is over."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # the last loop's timers went with it
            self._due.clear()
            self._timers.clear()
            self._loop = loop
        due = math.ceil((loop.time() + delay_s) * 1000)
        futures = self._due.get(due)
        if futures is None:
            futures = self._due[due] = set()
            self._timers[due] = loop.call_at(due / 1000, self._expire, due)
        futures.add(future)
        return due

    def discard(self, future: asyncio.Future[Any], due: int) -> None:
        """The wait is over: the timer no longer holds ``future`` (nor runs, once it holds
        none)."""
        futures = self._due.get(due)
        if futures is None:
            return
        futures.discard(future)
        if not futures:
            del self._due[due]
            self._timers.pop(due).cancel()

    def _expire(self, due: int) -> None:
        self._timers.pop(due, None)
        for future in self._due.pop(due, ()):
            if not future.done():
                future.set_exception(TimeoutError())

    def __len__(self) -> int:
        """The deadlines with a timer (a test's check that none is left behind)."""
        return len(self._timers)
