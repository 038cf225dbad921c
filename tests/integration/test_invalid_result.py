"""A broken contract over real Redis, at the default settings: dead-lettered on its first
delivery with ``invalid_result`` and the cause, in one WARNING line that shows no payload
value and no traceback (issue 38)."""

from __future__ import annotations

import logging

import pytest
from redis.asyncio import Redis

from deepagents.config import FileConfig, Settings
from deepagents.config.schema import AgentEntry
from deepagents.contract import Task
from deepagents.errors import ErrorCode
from deepagents.orchestrator import Orchestrator
from tests.contract_breakers import BREAKERS, RUNS, SECRET
from tests.support.workers import running_worker


@pytest.mark.parametrize("case", list(BREAKERS))
async def test_a_broken_contract_is_dead_lettered_on_its_first_delivery(
    case: str, client: Redis, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    agent, cause = BREAKERS[case]
    RUNS.clear()
    config = FileConfig(agents={agent.name: AgentEntry(settings={"shards": 1})})
    caplog.set_level(logging.INFO, logger="deepagents")
    async with (
        Orchestrator.from_client(client, config=config, settings=settings, agents=[agent]) as orch,
        running_worker(client, settings, config, agent()),
    ):
        handle = await orch.submit(Task(intent=agent.intents[0], payload={"k": SECRET}))
        # Far below one visibility timeout: a delivery left to be reclaimed would miss it.
        result = await handle.result(timeout=10)
        keys = orch.services.keys.shard(agent.name, 0)
        dead = await orch.services.tasks.dead_letters(agent.name, keys, 10)
    assert result.error is not None and result.error.code == ErrorCode.DEAD_LETTERED
    assert result.error.message.startswith("invalid_result: InvalidResult: ")
    assert [(d.task_id, d.reason, d.deliveries) for d in dead] == [
        (handle.task_id, ErrorCode.INVALID_RESULT, 1)
    ]
    assert cause in dead[0].error
    assert RUNS[agent.name] == 1
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        f"dead-lettered {handle.task_id}: invalid_result ({dead[0].error})"
    ]
    assert all(r.exc_info is None for r in caplog.records)
    assert SECRET not in caplog.text
