"""Start a coroutine at once, in the current task, and finish it there if it waits.

Python 3.12 has ``asyncio.eager_task_factory``; 3.11 does not. The worker starts a batch of
deliveries this way, one after the other in one task: most finish in their first step
(they hand their commit over without waiting for it), so a Task per delivery (its
creation, scheduling and bookkeeping) is saved. A coroutine that does wait is finished in
the same task by ``Resume``, so that the task it first ran in, which its timeouts and
cancellations refer to, stays its task to the end.

Kept because it pays: with a task per delivery instead, the worker spent about half as much
CPU again per task in the drain benchmark, every pair of the paired run
(``docs/benchmarks.md``, "Plain code on the delivery path").
"""

from __future__ import annotations

import contextvars
from collections.abc import Coroutine, Generator
from typing import Any


def first_step(coro: Coroutine[Any, Any, Any], context: contextvars.Context) -> tuple[bool, Any]:
    """Run the coroutine's first step in ``context``: (True, its result) when it finished,
    (False, what it yielded) when it waits."""
    try:
        return False, context.run(coro.send, None)
    except StopIteration as stop:
        return True, stop.value


class Resume:
    """Awaitable: drive a started coroutine to its end in the awaiting task, each step in
    the coroutine's own context (as a Task would run it); what the task is sent or thrown
    (a cancellation) goes on to the coroutine."""

    __slots__ = ("_context", "_coro", "_yielded")

    def __init__(
        self, coro: Coroutine[Any, Any, Any], context: contextvars.Context, yielded: Any
    ) -> None:
        self._coro, self._context, self._yielded = coro, context, yielded

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, run, yielded = self._coro, self._context.run, self._yielded
        while True:
            try:
                sent = yield yielded  # the future it waits on, as the task expects it
            except BaseException as exc:  # a cancellation, or this awaitable closed
                try:
                    yielded = run(coro.throw, exc)
                except StopIteration as stop:
                    return stop.value
                continue
            try:
                yielded = run(coro.send, sent)
            except StopIteration as stop:
                return stop.value
