"""A worker whose own heartbeat comes late does not run its entry twice.

XAUTOCLAIM takes every entry idle past the visibility timeout, the claiming consumer's own
too. Here the heartbeat is made rare (``heartbeat_ms``) and the task runs for three
visibility timeouts, so the worker's own reclaim pass finds its entry in flight: it must
leave it to the run it has (before the fix it began a second run beside the first, and
both passed the owner checks, being the same consumer's)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from redis.asyncio import Redis

from deepagents import AgentContract, Result
from deepagents.config import Settings, parse_config
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from tests.support.workers import running_worker

CONFIG = """
defaults: {shards: 1, block_ms: 100, visibility_timeout_ms: 500, reclaim_interval_ms: 100}
agents:
  slow: {class: "tests.integration.test_self_reclaim:Slow", settings: {heartbeat_ms: 600000}}
"""


class Slow(AgentContract):
    name = "slow"
    version = "1"
    intents = ("slow",)

    def __init__(self) -> None:
        self.runs = 0

    async def execute(self, context: dict[str, Any]) -> Result:
        self.runs += 1
        await asyncio.sleep(1.5)  # three visibility timeouts, with no heartbeat
        return Result(output={"runs": self.runs})


async def test_a_late_heartbeat_does_not_start_a_second_run_of_its_own_entry(
    client: Redis, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = parse_config(CONFIG)
    settings = Settings(prefix=prefix)
    agent = Slow()
    async with (
        Orchestrator.from_client(client, config=config, settings=settings) as orch,
        running_worker(client, settings, config, agent) as worker,
    ):
        with caplog.at_level(logging.WARNING, logger="deepagents.worker"):
            handle = await orch.submit(Task(intent="slow", payload={}))
            result = await handle.result(timeout=30)
        assert worker.stats.started == 1
    assert result.status is ResultStatus.SUCCESS, result.error
    assert agent.runs == 1
    assert result.metrics.attempts == 1
    assert any(getattr(r, "action", "") == "heartbeat_late" for r in caplog.records)
