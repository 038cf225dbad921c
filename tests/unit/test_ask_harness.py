"""ctx.ask in-process over the MemoryBus (``deepagents.testing.AgentHarness``), as an agent
author unit-tests an agent that asks a person: the task waits, a reply resumes it past its
step, a wrong answer is refused naming the field, a wait that runs out applies its policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepagents import Task
from deepagents.cli.audit import ask_detail
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


async def test_a_wait_longer_than_the_task_s_records_are_kept_is_refused() -> None:
    async with AgentHarness(ApprovalAgent) as h:
        payload = {"timeout_s": 9 * 86_400}  # the records live result_ttl_s (1 day) + 7 days
        result = await h.run(Task(intent="approve", payload=payload), timeout=10)
        assert await h.waiting() == []
    assert result.error is not None and result.error.code == "config_error"
    assert "past the time the task's records are kept" in result.error.message


def test_audit_show_says_what_was_asked_and_what_came_of_it() -> None:
    def row(kind: str, **detail: object) -> dict[str, object]:
        return {"type": kind, "detail": detail}

    waiting = row("waiting", ask="1", question="approve?", on_timeout="escalate")
    assert ask_detail(waiting) == "question 1: approve? (on timeout: escalate)"
    assert ask_detail(row("replied", ask="1")) == "question 1 answered"
    assert ask_detail(row("wait_expired")) == "nobody answered in time"
    escalated = row("escalated", ask="1", escalation_task_id="t-9")
    assert ask_detail(escalated) == "question 1 escalated to t-9"
    assert ask_detail(row("succeeded")) == ""
