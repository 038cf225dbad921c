"""Step records of every delivery in flight, sent together: one round trip per batch.

Records asked for while a batch is in the air wait for it and go in the next one, as the
group commit does (``committer.py``): under load a batch holds many records, and a lone
step waits for no one. Each record is still its own owner-checked script."""

from __future__ import annotations

import asyncio

from deepagents.transport.base import MessageBus, StepRecord, StreamRef

_Waiting = tuple[StreamRef, StepRecord, "asyncio.Future[str]"]


class StepWriter:
    def __init__(self, bus: MessageBus, group: str, consumer: str) -> None:
        self.bus, self.group, self.consumer = bus, group, consumer
        self._queue: list[_Waiting] = []
        self._busy = False

    def write(self, stream: StreamRef, item: StepRecord) -> asyncio.Future[str]:
        """The record's status (ok | lost | dup) once its batch lands."""
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._queue.append((stream, item, future))
        if not self._busy:
            self._busy = True
            asyncio.get_running_loop().call_soon(self._send)  # the same turn's join it
        return future

    def _send(self) -> None:
        batch, self._queue = self._queue, []
        task = asyncio.create_task(self._land(batch), name="step-records")
        task.add_done_callback(self._next)

    async def _land(self, batch: list[_Waiting]) -> None:
        try:
            statuses = await self.bus.record_steps(
                self.group, self.consumer, [(stream, item) for stream, item, _ in batch]
            )
        except Exception as exc:  # each waiting step raises it (the task is retried)
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        except BaseException:  # cancelled (shutdown): so are the steps waiting on it
            for _, _, future in batch:
                future.cancel()
            raise
        for (_, _, future), status in zip(batch, statuses, strict=True):
            if not future.done():  # its step was cancelled meanwhile: the record stands
                future.set_result(status)

    def _next(self, _: asyncio.Task[None]) -> None:
        if self._queue:
            self._send()
        else:
            self._busy = False
