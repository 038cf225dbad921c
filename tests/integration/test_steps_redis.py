"""Durable steps on the real Redis, in-process: limits and expiry. A checkpoint over
``max_state_bytes`` fails its task ``state_too_large`` and leaves the stored one intact; a
step result over ``step_inline_bytes`` with no database fails ``step_too_large``; a task's
records expire with its result."""

from __future__ import annotations

from typing import Any

import orjson
from redis.asyncio import Redis

from deepagents.config import FileConfig, Settings
from deepagents.contract import ResultStatus, Task
from deepagents.errors import ErrorCode
from deepagents.orchestrator import Orchestrator
from tests.steps_agents import GrowsAgent, LargeAgent
from tests.support.replies import as_bytes
from tests.support.workers import running_worker


def _config(agent: str, **settings: Any) -> FileConfig:
    return FileConfig.model_validate(
        {
            "defaults": {"shards": 1, "block_ms": 100},
            "agents": {agent: {"class": f"tests.steps_agents:{agent.title()}Agent",
                               "settings": settings}},
        }
    )  # fmt: skip


async def test_a_checkpoint_over_the_limit_fails_the_task_and_keeps_the_records(
    client: Redis, settings: Settings, prefix: str
) -> None:
    config = _config("grows", max_state_bytes=1024)
    async with (
        running_worker(client, settings, config, GrowsAgent()),
        Orchestrator.from_client(client, config=config, settings=settings) as orch,
    ):
        handle = await orch.submit(Task(intent="grows", payload={"size": 5000}))
        result = await handle.result(timeout=30)
    assert result.status is ResultStatus.FAILED and result.error is not None
    assert result.error.code == ErrorCode.STATE_TOO_LARGE
    assert "over max_state_bytes (1024); the last checkpoint stays" in result.error.message
    steps = f"{prefix}:{{grows:0}}:s:{handle.task_id}"
    records = await client.hgetall(steps)
    assert orjson.loads(as_bytes(records[b"state"])) == {"blob": "small"}
    assert records[b"step:before"] == b'"recorded"'
    assert records[b"state_version"] == b"1"
    assert 0 < await client.ttl(steps) <= settings.result_ttl_s


async def test_a_large_step_result_without_a_database_fails_step_too_large(
    client: Redis, settings: Settings, prefix: str
) -> None:
    config = _config("large", step_inline_bytes=1024)
    async with (
        running_worker(client, settings, config, LargeAgent()),
        Orchestrator.from_client(client, config=config, settings=settings) as orch,
    ):
        small = await (await orch.submit(Task(intent="large", payload={"size": 100}))).result(
            timeout=30
        )
        large = await orch.submit(Task(intent="large", payload={"size": 5000}))
        failed = await large.result(timeout=30)
    assert small.status is ResultStatus.SUCCESS and small.output == {"len": 100}
    assert failed.error is not None and failed.error.code == ErrorCode.STEP_TOO_LARGE
    assert "set DEEPAGENTS_DATABASE_URL" in failed.error.message
    assert await client.hlen(f"{prefix}:{{large:0}}:s:{large.task_id}") == 0
