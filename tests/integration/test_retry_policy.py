"""The YAML's retry rules over real Redis (issue 38): a ``KeyError`` declared non-retryable
ends its task on the first delivery, answered failed with the cause."""

from __future__ import annotations

from redis.asyncio import Redis

from deepagents.config import Settings
from deepagents.config.load import parse_config
from deepagents.contract import ResultStatus, Task
from deepagents.errors import ErrorCode
from deepagents.orchestrator import Orchestrator
from tests.retry_agents import RUNS, Lookup
from tests.support.workers import running_worker

CONFIG = """
agents:
  lookup:
    class: "tests.retry_agents:Lookup"
    settings: {shards: 1, non_retryable: [KeyError]}
"""


async def test_a_key_error_declared_non_retryable_ends_the_task_on_its_first_delivery(
    client: Redis, settings: Settings
) -> None:
    config = parse_config(CONFIG, source="deepagents.yaml")
    RUNS.clear()
    async with (
        Orchestrator.from_client(client, config=config, settings=settings) as orch,
        running_worker(client, settings, config, Lookup()),
    ):
        handle = await orch.submit(Task(intent="lookup", payload={}))
        result = await handle.result(timeout=10)
    assert result.status is ResultStatus.FAILED
    assert result.error is not None and result.error.code == ErrorCode.AGENT_ERROR
    assert result.error.message == "KeyError: 'missing'"
    assert result.metrics.attempts == 1
    assert RUNS["lookup"] == 1
