"""Results of submitted tasks: one reply channel per orchestrator, on which workers publish
each committed Result, with polling of the task hash as the fallback (a missed notification
only costs latency, and a task submitted elsewhere is seen by polling alone)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict

import orjson
from pydantic import ValidationError

from deepagents.contract.codec import decode_result
from deepagents.contract.result import Result
from deepagents.errors import ResultTimeout, TransportError
from deepagents.orchestrator.handle import TaskHandle
from deepagents.store.base import TaskRecords
from deepagents.transport.base import MessageBus, ReplyListener

log = logging.getLogger("deepagents.orchestrator")

# Results that came before anyone waited for them, kept for the waits that follow; the
# oldest go first past this many (most are never asked for).
_ARRIVED_MAX = 100_000


class Results:
    def __init__(self, bus: MessageBus, tasks: TaskRecords, reply_channel: str) -> None:
        self.bus, self.tasks, self.reply_channel = bus, tasks, reply_channel
        self._waiters: dict[str, asyncio.Future[Result]] = {}
        # Replies nobody waits for yet, as sent: validated only if someone asks.
        self._arrived: OrderedDict[str, bytes] = OrderedDict()
        self._replies: ReplyListener | None = None
        self._listener: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Subscribe to the reply channel (before anything is submitted)."""
        if self._replies is not None:
            return
        replies = self.bus.reply_listener(self.reply_channel, self._on_reply)
        await replies.open()
        self._replies = replies
        self._listener = asyncio.create_task(replies.run(), name="orchestrator-replies")

    async def aclose(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
            self._listener = None
        if self._replies is not None:
            await self._replies.aclose()
            self._replies = None
        for future in self._waiters.values():
            future.cancel()
        self._waiters.clear()

    async def wait(
        self, handle: TaskHandle, timeout: float | None, *, poll_s: float, max_poll_s: float
    ) -> Result:
        """``Orchestrator.wait_result``."""
        arrived = self._arrived.pop(handle.task_id, None)
        if arrived is not None:
            with contextlib.suppress(ValueError, ValidationError, orjson.JSONDecodeError):
                return decode_result(arrived)  # else: a bad reply; the task hash tells
        loop = asyncio.get_running_loop()
        future = self._waiters.get(handle.task_id)
        if future is None:
            future = self._waiters[handle.task_id] = loop.create_future()
        deadline = None if timeout is None else loop.time() + timeout
        poll = poll_s
        try:
            while True:
                wait = poll if deadline is None else min(poll, deadline - loop.time())
                if wait > 0:
                    with contextlib.suppress(TimeoutError):
                        return await asyncio.wait_for(asyncio.shield(future), wait)
                over = deadline is not None and loop.time() >= deadline
                try:
                    stored = await self._stored(handle.agent, handle.shard, handle.task_id)
                except TransportError as exc:
                    if over or not exc.retryable:
                        raise
                    stored = None
                if stored is not None:
                    return stored
                if over:
                    raise ResultTimeout(f"task {handle.task_id} has no result after {timeout} s")
                poll = min(poll * 2, max_poll_s)
        finally:
            self._waiters.pop(handle.task_id, None)

    async def _stored(self, agent: str, shard: int, task_id: str) -> Result | None:
        raw = await self.tasks.terminal_result(agent, shard, task_id)
        return None if raw is None else decode_result(raw)

    def _on_reply(self, data: bytes) -> None:
        """One message of the reply channel: a committed Result as JSON. Validated now
        only when someone waits for it; kept as sent otherwise (most are never asked for)."""
        try:
            body = orjson.loads(data)
            task_id = body["task_id"]
            if not isinstance(task_id, str):
                raise TypeError(f"task_id is {type(task_id).__name__}")
            future = self._waiters.get(task_id)
            if future is not None:
                if not future.done():
                    future.set_result(Result.model_validate(body))
                return
        except (ValueError, TypeError, KeyError, ValidationError) as exc:
            log.warning("undecodable reply ignored: %s", exc, extra={"action": "bad_reply"})
            return
        self._arrived[task_id] = data
        while len(self._arrived) > _ARRIVED_MAX:
            self._arrived.popitem(last=False)
