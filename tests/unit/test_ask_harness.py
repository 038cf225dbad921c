"""ctx.ask in-process over the MemoryBus (``deepagents.testing.AgentHarness``), as an agent
author unit-tests an agent that asks a person: the task waits, a reply resumes it past its
step, a wrong answer is refused naming the field, a wait that runs out applies its policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepagents import Task
from deepagents.errors import AlreadyReplied, InvalidReply
from deepagents.testing import AgentHarness
from tests.support.asking import ApprovalAgent
from tests.support.wait import eventually


async def test_a_reply_resumes_the_task_past_its_step(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    async with AgentHarness(ApprovalAgent) as h:
        handle = await h.submit(Task(intent="approve", payload={"runs": str(runs)}))

        async def asked() -> bool:
            return len(await h.waiting()) == 1

        await eventually(asked, timeout=10, what="the question")
        with pytest.raises(InvalidReply) as wrong:
            await h.reply(handle.task_id, {"approved": 1})
        assert wrong.value.field == "approved"
        await h.reply(handle.task_id, {"approved": True, "note": "fine"})
        with pytest.raises(AlreadyReplied):
            await h.reply(handle.task_id, {"approved": False})
        result = await handle.result(timeout=10)
    assert result.output == {"approved": True, "note": "fine"}
    lines = [line.split(" ", 1)[1] for line in runs.read_text().splitlines()]
    assert lines == ["start", "prepared", "start", "answered True"]


async def test_a_wait_that_runs_out_goes_on_with_the_default() -> None:
    async with AgentHarness(ApprovalAgent) as h:
        payload = {"timeout_s": 0.2, "on_timeout": "default", "default": True}
        result = await h.run(Task(intent="approve", payload=payload), timeout=10)
    assert result.output == {"approved": False, "note": "default"}
