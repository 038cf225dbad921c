"""ctx.delegate in-process over the MemoryBus (``deepagents.testing.AgentHarness``): the
same semantics the contract suite checks on every bus, seen from an agent: a fan-out with
a limit keeps at most that many children in flight and the parent's result holds every
child's; a failed child is a Result; the children inherit the tenant; their spend rolls
up; the depth limit refuses runaway recursion; cancelling the parent cancels its children."""

from __future__ import annotations

from pathlib import Path

from deepagents import ErrorCode, ResultStatus, Task
from deepagents.config.schema import DelegationConfig, FileConfig
from deepagents.testing import AgentHarness
from deepagents.worker.delegation import child_id
from tests.support.delegation import FamilyAgent, most_at_once
from tests.support.wait import eventually


async def test_ten_children_three_at_a_time_all_in_the_parent_s_result(tmp_path: Path) -> None:
    effects, runs = tmp_path / "effects", tmp_path / "runs"
    payload = {
        "n": 10,
        "limit": 3,
        "sleep": 0.05,
        "effects": str(effects),
        "runs": str(runs),
        "fail": [4],
    }
    async with AgentHarness(FamilyAgent) as h:
        task = Task(intent="family.fanout", payload=payload, tenant="acme")
        result = await h.run(task, timeout=30)
        info = await h.orchestrator.lookup(task.task_id)
        child = await h.orchestrator.lookup(result.output["children"][0])
    assert result.status is ResultStatus.SUCCESS
    out = result.output
    assert out["children"] == [child_id(task.task_id, step) for step in _steps(10)]
    assert out["statuses"].count("failed") == 1 and out["statuses"][4] == "failed"
    assert [o and o["i"] for o in out["outputs"]] == [0, 1, 2, 3, None, 5, 6, 7, 8, 9]
    assert {o["tenant"] for o in out["outputs"] if o} == {"acme"}
    lines = effects.read_text().splitlines()
    starts = [line.split()[1] for line in lines if line.startswith("start ")]
    assert sorted(starts) == sorted(out["children"])  # each child ran once
    assert most_at_once(lines) <= 3
    assert result.metrics.tokens_used == 90 and result.metrics.cost_usd == 4.5  # 9 succeeded
    assert info is not None and info["children"].split() == out["children"]
    assert child is not None and child["parent_id"] == task.task_id


async def test_a_child_s_id_is_the_parent_s_and_its_step_s(tmp_path: Path) -> None:
    async with AgentHarness(FamilyAgent) as h:
        result = await h.run(Task(intent="family.one"), timeout=30)
    assert result.output == {"child": {"i": 7, "tenant": None, "depth": 1}, "status": "success"}


async def test_the_depth_limit_refuses_runaway_recursion() -> None:
    config = FileConfig(delegation=DelegationConfig(max_depth=3))
    async with AgentHarness(FamilyAgent, config=config) as h:
        result = await h.run(Task(intent="family.recurse"), timeout=30)
    # depth 0 -> 1 -> 2 -> 3; the task at depth 3 may not delegate
    below = result.output["below"]["output"]["below"]["output"]["below"]
    assert below["error"]["code"] == ErrorCode.DELEGATION_TOO_DEEP
    assert "delegation.max_depth (3)" in below["error"]["message"]


async def test_a_child_that_is_no_task_fails_its_parent_in_one_line() -> None:
    async with AgentHarness(FamilyAgent) as h:
        result = await h.run(Task(intent="family.bad"), timeout=30)
    assert result.error is not None and result.error.code == ErrorCode.INVALID_INPUT
    assert "delegate('not an intent!'): intent: String should match" in result.error.message


async def test_cancelling_a_parent_cancels_each_running_child_once(tmp_path: Path) -> None:
    effects = tmp_path / "effects"
    payload = {"n": 4, "sleep": 3600, "effects": str(effects)}
    async with AgentHarness(FamilyAgent) as h:
        handle = await h.submit(Task(intent="family.fanout", payload=payload))

        async def all_started() -> bool:
            return effects.exists() and len(effects.read_text().splitlines()) == 4

        await eventually(all_started, timeout=10, what="four running children")
        assert await h.orchestrator.task_state(handle.task_id) == "waiting"
        assert await h.orchestrator.cancel(handle.task_id) == "ok"
        parent = await handle.result(timeout=10)
        assert parent.error is not None and parent.error.code == ErrorCode.CANCELLED
        kids = [child_id(handle.task_id, step) for step in _steps(4)]
        for kid in kids:
            got = await h.orchestrator.get_result(kid)
            assert got is not None and got.error is not None
            assert got.error.code == ErrorCode.CANCELLED
            assert await h.orchestrator.cancel(kid) == "done"  # once


def _steps(n: int) -> list[str]:
    """The step ids of ``n`` delegations in the root lane: delegate, delegate#2, ..."""
    return ["delegate", *(f"delegate#{i}" for i in range(2, n + 1))]
