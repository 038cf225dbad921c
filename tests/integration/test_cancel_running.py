"""Cancelling a running task over real Redis, its worker in this process: the worker hears
of it on its agent's cancel channel, its agent's coroutine is cancelled, and the task ends
``cancelled`` once (one terminal audit event, the submitter answered, its entry acked); a
cancel racing the task's own commit ends one way only."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from functools import partial
from typing import Any

import pytest
from redis.asyncio import Redis

from deepagents import AgentContract, Result
from deepagents.config import FileConfig, Settings
from deepagents.config.schema import AgentEntry
from deepagents.contract import ResultStatus, Task
from deepagents.errors import ErrorCode
from deepagents.orchestrator import Orchestrator
from tests.e2e.conftest import committed_events
from tests.support.wait import eventually
from tests.support.workers import running_worker


class HoldAgent(AgentContract):
    """Runs until the test releases its task (``release``); says when it starts and when
    its run is cancelled."""

    name = "hold"
    version = "1.0.0"
    intents = ("hold",)

    def __init__(self) -> None:
        self.started: set[str] = set()
        self.cancelled: Counter[str] = Counter()
        self.release: dict[str, asyncio.Event] = {}

    async def execute(self, context: dict[str, Any]) -> Result:
        task_id = str(context["task"].task_id)
        self.started.add(task_id)
        try:
            await self.release.setdefault(task_id, asyncio.Event()).wait()
        except asyncio.CancelledError:
            self.cancelled[task_id] += 1
            raise
        return Result(output={"released": True})


CONFIG = FileConfig(agents={"hold": AgentEntry(settings={"shards": 1})})


async def _started(agent: HoldAgent, task_id: str) -> bool:
    return task_id in agent.started


async def test_a_running_task_is_cancelled_once_and_its_run_stops(
    client: Redis, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(prefix=prefix, outbox=True)  # visibility 30 s: no reclaim helps here
    agent = HoldAgent()
    caplog.set_level(logging.INFO, logger="deepagents")
    async with (
        Orchestrator.from_client(
            client, config=CONFIG, settings=settings, agents=[HoldAgent]
        ) as orch,
        running_worker(client, settings, CONFIG, agent) as worker,
    ):
        handle = await orch.submit(Task(intent="hold", payload={}))
        task_id = str(handle.task_id)
        await eventually(partial(_started, agent, task_id), timeout=20, what="the run started")
        assert await orch.cancel(task_id) == "ok"
        result = await handle.result(timeout=20)  # the submitter is answered
        await eventually(lambda: _value(agent.cancelled[task_id]), timeout=20, what="run stopped")

        async def acked() -> bool:
            stats = await orch.bus.stream_stats(worker.streams[0], "hold")
            return stats.pending == 0 and worker.stats.duplicates == 1

        await eventually(acked, timeout=20, what="its entry acked as a duplicate")
        assert await orch.cancel(task_id) == "done"  # once
        stored = await orch.get_result(task_id)
        committed = await committed_events(client, prefix, "hold", 1)
    assert result.error is not None and result.error.code == ErrorCode.CANCELLED
    assert stored is not None and stored.error is not None
    assert stored.error.code == ErrorCode.CANCELLED
    assert agent.cancelled[task_id] == 1
    assert [(e["type"], e.get("reason")) for e in committed[task_id]] == [("failed", "cancelled")]
    assert worker.stats.committed == 0
    assert f"task {task_id} cancelled while running; its run here stops" in caplog.messages


async def _value(value: int) -> int:
    return value


async def test_a_cancel_racing_the_task_s_own_commit_ends_one_way_only(
    client: Redis, prefix: str
) -> None:
    settings = Settings(prefix=prefix, outbox=True)
    agent = HoldAgent()
    async with (
        Orchestrator.from_client(
            client, config=CONFIG, settings=settings, agents=[HoldAgent]
        ) as orch,
        running_worker(client, settings, CONFIG, agent) as worker,
    ):
        handles = [await orch.submit(Task(intent="hold", payload={})) for _ in range(6)]
        ids = [str(h.task_id) for h in handles]
        for task_id in ids:
            await eventually(partial(_started, agent, task_id), timeout=20, what="started")
        outcomes: dict[str, str] = {}
        for i, task_id in enumerate(ids):
            # Released and cancelled in one turn of the loop, in either order: the worker's
            # commit (through the group commit) and the cancel script race.
            release = agent.release.setdefault(task_id, asyncio.Event())
            if i % 2:
                release.set()
            cancel = asyncio.ensure_future(orch.cancel(task_id))
            release.set()
            outcomes[task_id] = await cancel
        results = {str(h.task_id): await h.result(timeout=20) for h in handles}

        async def settled() -> bool:
            stats = await orch.bus.stream_stats(worker.streams[0], "hold")
            return stats.pending == 0 and not worker.inflight

        await eventually(settled, timeout=20, what="every entry acked")
        committed = await committed_events(client, prefix, "hold", 1)
        stored = {t: await orch.get_result(t) for t in ids}
    for task_id in ids:
        assert outcomes[task_id] in ("ok", "done"), outcomes
        (event,) = committed[task_id]  # one terminal event, whichever won
        result, kept = results[task_id], stored[task_id]
        assert kept is not None and kept.status is result.status
        if outcomes[task_id] == "ok":
            assert result.error is not None and result.error.code == ErrorCode.CANCELLED
            assert (event["type"], event.get("reason")) == ("failed", "cancelled")
        else:
            assert result.status is ResultStatus.SUCCESS
            assert event["type"] == "succeeded"
    assert worker.stats.committed + worker.stats.duplicates == len(ids)


async def test_a_cancel_whose_message_was_lost_is_found_by_the_heartbeat(
    client: Redis, prefix: str
) -> None:
    settings = Settings(prefix=prefix, outbox=True)
    config = FileConfig(agents={"hold": AgentEntry(settings={"shards": 1, "heartbeat_ms": 200})})
    agent = HoldAgent()
    async with (
        Orchestrator.from_client(
            client, config=config, settings=settings, agents=[HoldAgent]
        ) as orch,
        running_worker(client, settings, config, agent) as worker,
    ):
        handle = await orch.submit(Task(intent="hold", payload={}))
        task_id = str(handle.task_id)
        await eventually(partial(_started, agent, task_id), timeout=20, what="the run started")
        keys = orch.services.keys.shard("hold", 0)
        cancelled = Result.failed(ErrorCode.CANCELLED, "cancelled", task_id=task_id, agent="hold")
        # As the orchestrator does, but nothing published: as if the worker's channel was down.
        status = await orch.bus.cancel(
            keys, task_id, cancelled.model_dump_json().encode(), (), running=True
        )
        assert status == "ok"
        await eventually(lambda: _value(agent.cancelled[task_id]), timeout=20, what="run stopped")

        async def acked() -> bool:
            stats = await orch.bus.stream_stats(worker.streams[0], "hold")
            return stats.pending == 0

        await eventually(acked, timeout=20, what="its entry acked as a duplicate")
    assert worker.stats.duplicates == 1 and worker.stats.committed == 0
