"""A deadline on a future rather than on the task awaiting it.

``asyncio.timeout`` around ``await asyncio.shield(future)`` costs a timeout scope, a shield
(an outer future and two callbacks) and a task cancellation per wait; the worker waits so
for every remote task. A timer that sets ``TimeoutError`` on the future itself ends the
wait the same way, for a fraction of that, and the future is done at once: whoever would
answer it later (a batch, a puller) sees that nobody waits any more.
"""

from __future__ import annotations

import asyncio
from typing import Any


def expire_after(future: asyncio.Future[Any], delay_s: float) -> asyncio.TimerHandle:
    """In ``delay_s``, unless it is done by then, end ``future`` with ``TimeoutError``;
    cancel the handle once the wait is over."""
    return asyncio.get_running_loop().call_later(delay_s, _expire, future)


def _expire(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())
