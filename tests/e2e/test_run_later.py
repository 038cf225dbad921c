"""Run later (``Task.not_before``), end to end on a single Redis and on a Cluster: a real
worker, the orchestrator, the shard's delayed set. The start a worker records in the task
hash (``started_ms``, written by the begin script) is held against ``not_before``; how late
it starts is a figure for docs/benchmarks.md, not a bound here."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from redis.asyncio import Redis

from deepagents.config import FileConfig, Settings
from deepagents.contract import ResultStatus, Task
from deepagents.contract.task import utcnow
from deepagents.errors import ErrorCode, NotBeforeTooFar
from deepagents.orchestrator import Orchestrator
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams import connect
from tests.support.wait import eventually
from tests.support.workers import running_worker


@pytest.fixture(params=["redis", "cluster"])
async def target(
    request: pytest.FixtureRequest, prefix: str
) -> AsyncIterator[tuple[Redis, Settings]]:
    """The runtime's client and settings on one Redis, or on a Cluster; the test's keys are
    deleted afterwards (one by one: on a Cluster they span slots)."""
    cluster = request.param == "cluster"
    # Sync session fixtures: an async fixture cannot ask for another async one by name.
    url = request.getfixturevalue("cluster_url" if cluster else "redis_url")
    runtime = connect(url, cluster=cluster)
    try:
        yield runtime, Settings(redis_url=url, redis_cluster=cluster, prefix=prefix, outbox=True)
    finally:
        async for key in runtime.scan_iter(match=f"{prefix}:*", count=1000):
            await runtime.delete(key)
        await runtime.aclose()


async def test_a_task_starts_no_earlier_than_its_not_before(
    target: tuple[Redis, Settings], config: FileConfig
) -> None:
    client, settings = target
    async with (
        running_worker(client, settings, config),
        Orchestrator.from_client(client, config=config, settings=settings) as orch,
    ):
        not_before = utcnow() + timedelta(seconds=2)
        handle = await orch.submit(Task(intent="echo", payload={"x": 1}, not_before=not_before))
        assert await handle.state() == "scheduled"
        result = await handle.result(timeout=30)
        assert result.status is ResultStatus.SUCCESS
        info = await orch.lookup(handle.task_id)
        assert info is not None
        started_ms = int(info["started_ms"])
        assert started_ms >= int(not_before.timestamp() * 1000), started_ms


async def test_a_task_cancelled_while_scheduled_never_runs(
    target: tuple[Redis, Settings], config: FileConfig, prefix: str
) -> None:
    client, settings = target
    async with (
        running_worker(client, settings, config),
        Orchestrator.from_client(client, config=config, settings=settings) as orch,
    ):
        handle = await orch.submit(Task(intent="echo"), delay=timedelta(milliseconds=500))
        assert await handle.state() == "scheduled"
        assert await orch.cancel(handle.task_id) == "ok"
        shard = Keys(prefix).shard("echo", handle.shard)

        async def drained() -> bool:
            # Due, promoted, read, and acked as a duplicate by the worker: nothing is left.
            left = await client.zcard(shard.delayed) + await client.xlen(shard.stream("p2"))
            return left == 0

        await eventually(drained, what="the cancelled task's member promoted and dropped")
        info = await orch.lookup(handle.task_id)
        assert info is not None
        assert "started_ms" not in info and info["state"] == "done"
        result = await orch.get_result(handle.task_id)
        assert result is not None and result.error is not None
        assert result.error.code == ErrorCode.CANCELLED


async def test_a_not_before_past_the_horizon_is_refused(
    target: tuple[Redis, Settings], config: FileConfig
) -> None:
    client, settings = target
    near = settings.model_copy(update={"max_schedule_ahead_s": 60})
    async with Orchestrator.from_client(client, config=config, settings=near) as orch:
        with pytest.raises(NotBeforeTooFar, match="DEEPAGENTS_MAX_SCHEDULE_AHEAD_S"):
            await orch.submit(Task(intent="echo"), delay=timedelta(seconds=61))
        assert await orch.submit(Task(intent="echo"), delay=timedelta(seconds=59))
