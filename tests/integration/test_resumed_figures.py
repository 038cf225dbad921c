"""A task's figures across its deliveries, over real Redis: a delivery that spent on model
calls (in a recorded step and outside one) and then failed is retried; the Result of the
second counts two attempts, its latency from the first start, and every delivery's spend
(the recorded step's once, each delivery's own calls)."""

from __future__ import annotations

import time
from typing import Any

import orjson
from redis.asyncio import Redis

from deepagents import AgentContract, Result, RetryableError
from deepagents.config import FileConfig, Settings
from deepagents.config.schema import AgentEntry
from deepagents.contract import ResultStatus, Task
from deepagents.modelcall.record import AttemptRecord
from deepagents.modelcall.usage import current_usage
from deepagents.orchestrator import Orchestrator
from tests.support.replies import entries
from tests.support.workers import running_worker


def _pay(tokens_in: int, tokens_out: int, cost: float) -> None:
    """What a wrapped model call adds to the running task's ledger."""
    ledger = current_usage()
    assert ledger is not None
    paid = AttemptRecord("sim", 1, "ok", "0" * 64, tokens_in=tokens_in, tokens_out=tokens_out,
                         cost_usd=cost)  # fmt: skip
    ledger.add("sim", (paid,), degraded=False)


class Spender(AgentContract):
    """Pays for a model call in a step (recorded: paid once), then for one outside any step
    on every delivery; its first delivery then fails (retried)."""

    name = "spender"
    version = "1"
    intents = ("spend",)

    def __init__(self) -> None:
        self.starts: list[float] = []  # wall clock, per delivery

    async def execute(self, context: dict[str, Any]) -> Result:
        self.starts.append(time.time())
        await context["ctx"].step("plan", self._plan)
        _pay(10, 0, 0.125)
        if len(self.starts) == 1:
            raise RetryableError("fails after spending")
        return Result(output={"deliveries": len(self.starts)})

    def _plan(self) -> str:
        _pay(100, 20, 0.5)
        return "planned"


async def test_a_retried_task_counts_every_delivery_s_attempt_time_and_spend(
    client: Redis, prefix: str
) -> None:
    settings = Settings(prefix=prefix, outbox=True)
    entry = AgentEntry(settings={"shards": 1, "retry": {"base_ms": 300, "max_ms": 300}})
    config = FileConfig(agents={"spender": entry})
    agent = Spender()
    async with (
        Orchestrator.from_client(
            client, config=config, settings=settings, agents=[Spender]
        ) as orch,
        running_worker(client, settings, config, agent),
    ):
        handle = await orch.submit(Task(intent="spend", payload={}))
        result = await handle.result(timeout=30)
    assert result.status is ResultStatus.SUCCESS, result
    assert len(agent.starts) == 2
    assert result.metrics.attempts == 2
    # from the first start: both runs and the retry's wait between them
    latency_ms = result.metrics.latency_ms
    assert latency_ms is not None and latency_ms >= (agent.starts[1] - agent.starts[0]) * 1000 - 5
    assert result.metrics.tokens_used == 120 + 10 + 10  # the step once, each delivery's call
    assert result.metrics.cost_usd == 0.5 + 0.125 + 0.125
    calls = [
        event
        for _, fields in await entries(client, f"{prefix}:{{spender:0}}:audit")
        for event in orjson.loads(fields[b"events"])
        if event["type"] == "model_call"
    ]
    assert len(calls) == 3  # every call made, the failed delivery's among them
