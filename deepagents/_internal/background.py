"""Work sent off without waiting for it, kept until it ends and awaited at close.

The breakers' flushes of held successes use it: a success in a closed circuit only feeds
the window, so the answer need not wait for the write, but closing must not lose it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class Background:
    """Tasks started by ``send`` and held (an unreferenced task can be collected mid-run);
    ``drain`` waits for those still running. Their failures are dropped: a lost flush costs
    a breaker's window a few successes, nothing more."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def send(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._settled)

    def _settled(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved, so asyncio does not log it as never retrieved

    async def drain(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
