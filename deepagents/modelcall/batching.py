"""Coalescing concurrent requests of one worker into batches.

Callers ``submit`` their items; a batch is sent when it holds ``batch_size`` items or when
its first caller has waited ``max_wait_ms``, whichever comes first. A caller's items are
never split across batches: a caller that would overflow the open batch sends it first, and
a caller with more than ``batch_size`` items goes alone. Sending is the owner's ``send``
coroutine, run as a task of its own, which settles every caller's future.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from deepagents.config.models import BatchingConfig


@dataclass
class Waiter:
    """One caller in a batch: its inputs, its deadline (``loop.time()``) and its answer."""

    inputs: Sequence[str]
    deadline: float
    future: asyncio.Future[Any]


Send = Callable[[list[Waiter]], Coroutine[Any, Any, None]]


class Batcher:
    def __init__(self, batching: BatchingConfig, send: Send) -> None:
        self.batch_size = batching.batch_size
        self.max_wait_s = batching.max_wait_ms / 1000
        self._send = send
        self._open: list[Waiter] = []
        self._size = 0
        self._timer: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()
        self.batches_sent = 0

    def submit(self, waiter: Waiter) -> None:
        if self._open and self._size + len(waiter.inputs) > self.batch_size:
            self._flush()  # this caller would overflow the open batch: it starts the next
        self._open.append(waiter)
        self._size += len(waiter.inputs)
        if self._size >= self.batch_size:
            self._flush()
        elif self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.max_wait_s, self._flush)

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._open, self._size = self._open, [], 0
        if not batch:
            return
        self.batches_sent += 1
        task = asyncio.get_running_loop().create_task(self._send(batch))
        self._sending.add(task)  # a strong reference until it is done
        task.add_done_callback(self._sending.discard)

    async def aclose(self, error: BaseException) -> None:
        """Fail the callers of the open batch with ``error``; wait for batches in flight."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for waiter in self._open:
            if not waiter.future.done():
                waiter.future.set_exception(error)
        self._open, self._size = [], 0
        if self._sending:
            await asyncio.wait(self._sending, timeout=5)
