"""Group commit for the concurrent callers of one process: the one mechanism behind the
gateway's admission round trips (``transport/redis_streams/batcher.py``), the
orchestrator's submits (``orchestrator/coalesce.py``) and a worker's step records
(``worker/steps.py``).

Most of a small request's cost is per round trip (a socket write and read, packing,
parsing, a wake-up), not per item. So while one batch is on the wire, the items that
arrive queue up and go together in the next one. Alone, an item is sent at once (no
timer, no added delay); under load, one round trip serves many callers. ``send`` answers
every item of its batch, a result or an exception each, so batching changes no caller's
outcome. A queued item is sent even if its caller stops waiting (a client that
disconnected): what was asked for is done, as it would be had it been on the wire. A lone
caller's item is on the wire at once, from the caller's own task: cancelling that caller
cancels its round trip, as it would without the group commit.

With ``from_caller=False`` every item goes from the flusher's task, a lone one too: the
items asked for in one turn of the loop share its first batch, and a caller that stops
waiting never cancels a round trip (a step cancelled while its record is on the wire: the
record lands, or fails, as if the step had waited).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Out = TypeVar("Out")

Send = Callable[[list[Item]], Awaitable[Sequence[Out | BaseException]]]


class GroupCommit(Generic[Item, Out]):
    def __init__(self, send: Send[Item, Out], *, name: str, from_caller: bool = True) -> None:
        self._send = send
        self._name = name
        self._from_caller = from_caller
        self._queue: list[tuple[Item, asyncio.Future[Out]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._leading = False  # a lone caller's item is on the wire (``_alone``)

    async def __call__(self, item: Item) -> Out:
        """The item's own outcome: its result, or its exception raised."""
        if self._from_caller and not self._busy:
            return await self._alone(item)
        future: asyncio.Future[Out] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        if self._flusher is None and not self._leading:
            self._flusher = asyncio.create_task(self._flush(), name=self._name)
        return await future

    @property
    def _busy(self) -> bool:
        return self._leading or self._flusher is not None

    async def _alone(self, item: Item) -> Out:
        """Nothing on the wire: the caller sends its item from its own task, with no
        future and no flusher task to wake (a lone caller is the common case at light
        load; what it saves a sequential ``Orchestrator.submit`` is in
        ``docs/benchmarks.md``). Whoever arrives meanwhile queues, and a flusher takes
        them once this is back."""
        self._leading = True
        try:
            (outcome,) = await self._send([item])
        finally:
            self._leading = False
            if self._queue and self._flusher is None:
                self._flusher = asyncio.create_task(self._flush(), name=self._name)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def _flush(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                await self._one(batch)
        finally:
            self._flusher = None

    async def _one(self, batch: list[tuple[Item, asyncio.Future[Out]]]) -> None:
        try:
            outcomes = await self._send([item for item, _ in batch])
        except BaseException as exc:  # the round trip failed: every caller meets it
            for _, future in batch:
                _fail(future, exc)
            if not isinstance(exc, Exception):
                raise  # cancelled (shutdown): the waiters have been told
            return
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            if future.done():  # a caller that went away (client disconnect) is skipped
                continue
            if isinstance(outcome, BaseException):
                _fail(future, outcome)
            else:
                future.set_result(outcome)


def _fail(future: asyncio.Future[Out], exc: BaseException) -> None:
    if future.done():
        return
    if isinstance(exc, Exception):
        future.set_exception(exc)
    else:
        future.cancel()
