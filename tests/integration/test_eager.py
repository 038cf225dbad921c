"""A batch's deliveries start one after the other in one task (``worker/execution.py``,
``_internal/eager.py``) until one waits, the rest then each in a task of its own: one
that waits must not hold up the rest of its batch, its deadline must cancel it alone, and
each must see its own context variables."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import pytest
from redis.asyncio import Redis

from deepagents import AgentContract, Result
from deepagents.config import Settings, parse_config
from deepagents.contract import ErrorCode, ResultStatus, Task
from deepagents.contract.task import utcnow
from deepagents.orchestrator import Orchestrator
from deepagents.telemetry.logs import current_task_id
from deepagents.worker.begin import Begin
from deepagents.worker.delivery import DeliveryHandler
from tests.support.workers import running_worker

CONFIG = """
defaults: {shards: 1, block_ms: 100}
agents: {probe: {class: "tests.integration.test_eager:ContextProbe"}}
"""


class ContextProbe(AgentContract):
    """Reports the task id its context holds, before and after it waits for ``release``
    (payload ``wait``)."""

    name = "probe"
    version = "1.0.0"
    intents = ("probe",)

    def __init__(self, release: asyncio.Event | None = None) -> None:
        self.release = release or asyncio.Event()

    async def execute(self, context: dict[str, Any]) -> Result:
        before = current_task_id.get()
        if context["payload"].get("wait"):
            await self.release.wait()
        return Result(output={"before": before, "after": current_task_id.get()})


@pytest.mark.parametrize("expiring_first", [True, False])
async def test_a_waiting_delivery_holds_up_neither_its_batch_nor_its_context(
    client: Redis, prefix: str, expiring_first: bool
) -> None:
    """The first delivery that waits goes on in its batch's task, the ones after it each
    in a task of its own: the one whose deadline passes is either."""
    config = parse_config(CONFIG)
    settings = Settings(prefix=prefix, outbox=True)
    release = asyncio.Event()
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        # Queued before the worker starts: read and begun as one batch, the waiting ones
        # first.
        soon = utcnow() + timedelta(seconds=1)
        expiring = Task(intent="probe", payload={"wait": True}, deadline=soon)
        waiting = Task(intent="probe", payload={"wait": True})
        order = [expiring, waiting] if expiring_first else [waiting, expiring]
        handles = {task.task_id: await orch.submit(task) for task in order}
        slow = [handles[expiring.task_id], handles[waiting.task_id]]
        fast = await orch.submit_many([Task(intent="probe", payload={}) for _ in range(30)])
        async with running_worker(client, settings, config, ContextProbe(release)):
            done = await asyncio.gather(*(h.result(timeout=30) for h in fast))
            expired = await slow[0].result(timeout=30)  # its deadline, while it waits
            assert await slow[1].state() == "running"  # nothing has released it yet
            release.set()
            waited = await slow[1].result(timeout=30)
    for handle, result in zip(fast, done, strict=True):
        assert result.status is ResultStatus.SUCCESS
        assert result.output == {"before": handle.task_id, "after": handle.task_id}
    # The deadline cancelled the delivery it belongs to, and only that one.
    assert expired.status is ResultStatus.FAILED
    assert expired.error is not None and expired.error.code == ErrorCode.DEADLINE_EXCEEDED
    assert waited.status is ResultStatus.SUCCESS
    assert waited.output == {"before": slow[1].task_id, "after": slow[1].task_id}


class Counting(AgentContract):
    name = "probe"
    version = "1.0.0"
    intents = ("probe",)

    def __init__(self) -> None:
        self.ran: list[str] = []

    async def execute(self, context: dict[str, Any]) -> Result:
        self.ran.append(context["task"].task_id)
        return Result(output={})


async def test_a_delivery_lost_before_its_batch_task_reaches_it_is_skipped(
    client: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Ownership lost between its begin and its batch's first step (the heartbeat found
    another owner): the batch's task skips it and frees its slot; the rest of the batch
    runs. Cancelling the shared task instead would have stopped them all."""
    config = parse_config(
        CONFIG.replace("block_ms: 100", "block_ms: 100, visibility_timeout_ms: 500")
    )
    settings = Settings(prefix=prefix, outbox=True)
    begin = Begin.begin
    handlers: list[DeliveryHandler] = []
    init = DeliveryHandler.__init__

    def keep(self: DeliveryHandler, *args: Any, **kw: Any) -> None:
        init(self, *args, **kw)
        handlers.append(self)

    marked: list[str] = []

    async def begin_then_lose_one(self: Begin, *args: Any, **kw: Any) -> Any:
        flights = await begin(self, *args, **kw)
        if flights and not marked:  # the first batch: its task has not run yet
            marked.append(flights[0].envelope.task.task_id)
            (handler,) = handlers
            handler.lost(flights[0].stream, flights[0].entry_id)  # as the heartbeat does
        return flights

    monkeypatch.setattr(DeliveryHandler, "__init__", keep)
    monkeypatch.setattr(Begin, "begin", begin_then_lose_one)
    agent = Counting()
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        handles = await orch.submit_many([Task(intent="probe", payload={}) for _ in range(10)])
        async with running_worker(client, settings, config, agent) as worker:
            with caplog.at_level(logging.WARNING, logger="deepagents.worker"):
                results = await asyncio.gather(*(h.result(timeout=30) for h in handles))
            assert worker.stats.lost_ownership == 1
            assert not worker.inflight  # every delivery settled, the skipped one too
    # The skipped one ran once, on its second delivery (reclaimed after the visibility
    # timeout: it was still pending here); run in its first, it would show one delivery.
    assert sorted(agent.ran) == sorted(h.task_id for h in handles)
    attempts = {h.task_id: r.metrics.attempts for h, r in zip(handles, results, strict=True)}
    assert attempts.pop(marked[0]) == 2
    # Said once, with the task: what an operator looks for after a worker stalled.
    lost = [r for r in caplog.records if getattr(r, "action", "") == "lease_lost"]
    assert [getattr(r, "task_id", None) for r in lost] == marked
    assert set(attempts.values()) == {1}
