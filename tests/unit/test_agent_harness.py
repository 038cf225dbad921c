"""deepagents.testing: an agent run over MemoryBus through the real worker and orchestrator,
with retries, deadlines and dead letters, and no server. These tests use no Redis fixture:
the services have no client, so any Redis command would fail them."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

from agents.echo import EchoAgent
from deepagents import AgentContract, Result, Task
from deepagents.contract.task import utcnow
from deepagents.errors import ErrorCode
from deepagents.testing import AgentHarness

README = Path(__file__).resolve().parents[2] / "README.md"


class AlwaysFails(AgentContract):
    name = "always_fails"
    version = "1.0.0"
    intents = ("always_fails",)

    async def execute(self, context: dict[str, Any]) -> Result:
        raise ConnectionError("never answers")


class Slow(AgentContract):
    name = "slow"
    version = "1.0.0"
    intents = ("slow",)

    async def execute(self, context: dict[str, Any]) -> Result:
        await asyncio.sleep(60)
        return Result(output={})


async def test_a_task_runs_to_its_result() -> None:
    async with AgentHarness(EchoAgent) as h:
        assert h.services.client is None
        result = await h.run(Task(intent="echo", payload={"n": 1}))
    assert (result.status.value, result.output) == ("success", {"n": 1})


async def test_a_task_that_keeps_failing_is_dead_lettered_after_max_deliveries() -> None:
    async with AgentHarness(AlwaysFails, settings={"max_deliveries": 3}) as h:
        result = await h.run(Task(intent="always_fails", payload={}))
        dead = await h.dead_letters()
    assert result.error is not None and result.error.code == ErrorCode.DEAD_LETTERED
    assert [(d.task_id, d.reason, d.deliveries) for d in dead] == [
        (result.task_id, ErrorCode.MAX_DELIVERIES, 3)
    ]


async def test_a_deadline_that_passes_while_running_ends_the_task() -> None:
    async with AgentHarness(Slow) as h:
        deadline = utcnow() + timedelta(milliseconds=300)
        result = await h.run(Task(intent="slow", payload={}, deadline=deadline))
    assert result.error is not None and result.error.code == ErrorCode.DEADLINE_EXCEEDED


def test_the_readme_example_runs() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Testing your agent", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    # Run as a script: asyncio.run needs no running loop, so not inside an async test.
    exec(compile(code, str(README), "exec"), {"__name__": "readme"})
