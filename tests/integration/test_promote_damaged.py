"""A shard whose delayed set was damaged (a string where the sorted set should be, so the
promote script meets WRONGTYPE, which no retry cures) stops neither the worker nor the
retries of its other shards: the error is logged, and the rest is promoted as before. A
damaged member of the set ends its task dead with the reason, its submitter answered."""

from __future__ import annotations

import logging
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from deepagents import AgentContract, Result, RetryableError
from deepagents.config import Settings, parse_config
from deepagents.contract import ErrorCode, ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from deepagents.transport.keys import Keys, shard_of
from tests.support.wait import eventually
from tests.support.workers import running_worker

CONFIG = """
defaults: {shards: 2, block_ms: 100, retry: {base_ms: 20, max_ms: 50}}
agents: {once: {class: "tests.integration.test_promote_damaged:FailsOnce"}}
"""


class FailsOnce(AgentContract):
    name = "once"
    version = "1"
    intents = ("once",)

    async def execute(self, context: dict[str, Any]) -> Result:
        if _first(context["task"].task_id):
            raise RetryableError("the first attempt fails: its retry goes through the delayed set")
        return Result(output={"ok": True})


_FAILED: set[str] = set()


def _first(task_id: str) -> bool:
    first = task_id not in _FAILED
    _FAILED.add(task_id)
    return first


def _ids_on_shard(prefix: str, shard: int, n: int) -> list[str]:
    candidates = (f"{prefix}-{i}" for i in range(1000))
    return [task_id for task_id in candidates if shard_of(task_id, 2) == shard][:n]


async def test_a_damaged_delayed_set_stops_neither_the_worker_nor_the_other_shards(
    client: Redis, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = parse_config(CONFIG)
    settings = Settings(prefix=prefix)
    damaged = Keys(prefix).shard("once", 0).delayed
    await client.set(damaged, "not a sorted set")
    _FAILED.clear()
    ids = _ids_on_shard(prefix, 1, 3)
    async with (
        Orchestrator.from_client(client, config=config, settings=settings) as orch,
        running_worker(client, settings, config, FailsOnce()) as worker,
    ):
        with caplog.at_level(logging.ERROR, logger="deepagents.worker"):
            handles = [await orch.submit(Task(task_id=i, intent="once", payload={})) for i in ids]
            results = [await h.result(timeout=30) for h in handles]
        assert worker.accepting()  # still reading its streams
    assert [r.status for r in results] == [ResultStatus.SUCCESS] * len(ids)
    assert all(r.metrics.attempts == 2 for r in results)  # each retried via shard 1's set
    refusals = [r for r in caplog.records if getattr(r, "action", "") == "promote_refused"]
    assert refusals and damaged in refusals[0].getMessage()


LATER = """
defaults: {shards: 1, block_ms: 100, retry: {base_ms: 600000, max_ms: 600000, jitter: false}}
agents: {once: {class: "tests.integration.test_promote_damaged:FailsOnce"}}
"""


async def test_a_task_whose_retry_member_was_damaged_ends_dead_with_the_reason(
    client: Redis, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = parse_config(LATER)
    settings = Settings(prefix=prefix, outbox=True)
    delayed = Keys(prefix).shard("once", 0).delayed
    _FAILED.clear()
    async with (
        Orchestrator.from_client(client, config=config, settings=settings) as orch,
        running_worker(client, settings, config, FailsOnce()),
    ):
        handle = await orch.submit(Task(intent="once", payload={}))
        members = await eventually(
            lambda: client.zrange(delayed, 0, -1), timeout=30, what="its retry"
        )
        (member,) = members
        assert isinstance(member, bytes)
        damaged = orjson.loads(member) | {"attempt": "two"}  # its task is still readable
        with caplog.at_level(logging.WARNING, logger="deepagents.worker"):
            pipe = client.pipeline(transaction=True)
            pipe.zrem(delayed, member)
            pipe.zadd(delayed, {orjson.dumps(damaged): 0})
            await pipe.execute()
            result = await handle.result(timeout=30)  # answered, not left to time out
        assert await orch.task_state(handle.task_id) == "dead"
        dead = await orch.services.tasks.dead_letters("once", Keys(prefix).shard("once", 0), 10)
    assert result.error is not None and result.error.code == ErrorCode.DEAD_LETTERED
    assert result.error.message == (
        "decode_error: its retry in the delayed set was damaged (attempt is not an integer >= 1)"
    )
    assert [d.reason for d in dead] == ["decode_error"]
    said = [r.getMessage() for r in caplog.records if getattr(r, "task_id", None)]
    assert said == [f"task {handle.task_id} ended dead: {result.error.message}"]
