"""The one-call forms of the wire protocol: ``run`` (the whole contract of one task in one
call) and ``run_batch`` (several tasks per request, each answered on its own), through the
real RemoteAgent adapter against the real reference services.

Bad answers in a batch are each a protocol error of the tasks they concern, and of no
other: an answer missing, one naming another task of the batch (that task is then answered
twice), one over the size limit, one that does not match the schema."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from agents.risk import RiskAgent
from deepagents.config import FileConfig
from deepagents.config.schema import AgentEntry
from deepagents.contract import Result, ResultStatus, Task
from deepagents.errors import RemoteProtocolError
from deepagents.remote import RemoteAgent, remote_agent_class
from deepagents.worker.agent_calls import AgentRunner
from tests.remote.conftest import Service, StartNode
from tests.remote.test_reference_agents import answer, executor, orders

__all__ = ["executor"]  # the fixture, shared with the four-call form's test
ORDER = {"symbol": "IF", "side": "buy", "quantity": 2, "price": "4000.5",
         "available_funds": "1000000.00"}  # fmt: skip


def remote(url: str, **options: Any) -> RemoteAgent:
    entry = FileConfig.model_validate(
        {"agents": {"risk-x": {"intents": ["risk_check"], "remote": {"url": url, **options}}}}
    ).agents["risk-x"]
    assert isinstance(entry, AgentEntry)
    return remote_agent_class("risk-x", entry)()


async def same_answers_at_once(service: Service, executor: ThreadPoolExecutor) -> None:
    """Every order at once (so they share requests when the service batches): the answers
    are the in-process RiskAgent's, task for task."""
    local = AgentRunner(RiskAgent(), executor)
    agent = remote(service.url, batch={"max_tasks": 8})
    over_wire = AgentRunner(agent, executor)
    try:
        tasks = [Task(intent="risk_check", payload=p) for p in orders()]
        expected = [await answer(local, task) for task in tasks]
        got = await asyncio.gather(*(answer(over_wire, task) for task in tasks))
        assert got == expected
        assert sum(e[0] == "success" for e in expected) > 50
    finally:
        await agent.aclose()


@pytest.mark.parametrize("methods", ["run", "run_batch"])
async def test_the_node_agent_answers_as_the_risk_agent_in_one_call_per_task_or_batched(
    node_agent: StartNode, executor: ThreadPoolExecutor, methods: str
) -> None:
    service = node_agent(methods=methods)
    await same_answers_at_once(service, executor)
    calls = service.calls()
    assert {c["step"] for c in calls} == {methods}  # one call per task, nothing else
    keys = [c["key"] for c in calls]
    assert len(keys) == len(set(keys)) == len(orders())
    if methods == "run_batch":
        requests = {c["request"] for c in calls}
        assert len(requests) < len(calls)  # tasks shared requests


async def test_the_python_agent_answers_as_the_risk_agent_batched(
    python_agent: Service, executor: ThreadPoolExecutor
) -> None:
    await same_answers_at_once(python_agent, executor)


async def run_together(agent: RemoteAgent, payloads: list[dict[str, Any]]) -> list[Any]:
    """The payloads' tasks started in one turn of the loop: one batch, in this order."""
    with ThreadPoolExecutor(2) as pool:
        runner = AgentRunner(agent, pool)
        await agent.introduce()  # the service's methods known before the batch forms
        tasks = [Task(intent="risk_check", payload=p) for p in payloads]
        return await asyncio.gather(*(runner.run(t) for t in tasks), return_exceptions=True)


def protocol_error(outcome: Any, says: str) -> None:
    assert isinstance(outcome, RemoteProtocolError), outcome
    assert str(outcome).startswith("run_batch: ") and says in str(outcome), str(outcome)


async def test_each_bad_answer_in_a_batch_fails_its_own_task_only(node_agent: StartNode) -> None:
    service = node_agent(methods="run_batch")
    agent = remote(service.url, max_response_bytes=2048)
    bad = [
        {**ORDER, "batch": "omit"},  # 1: no answer
        {**ORDER, "batch": "steal"},  # 2: answers as task 3, so 2 has none and 3 has two
        ORDER,  # 3: its own answer and 2's
        {**ORDER, "batch": "twice"},  # 4: answered twice
        {**ORDER, "batch": "huge", "size": 4000},  # 5: one answer over 2,048 bytes
        {**ORDER, "batch": "malformed"},  # 6: a status the schema does not have
    ]
    try:
        outcomes = await run_together(agent, [ORDER, *bad, ORDER])
    finally:
        await agent.aclose()
    assert len({c["request"] for c in service.calls()}) == 1  # one request
    good = [outcomes[0], outcomes[7]]
    assert all(isinstance(r, Result) and r.status is ResultStatus.SUCCESS for r in good), good
    assert good[0].output["margin"] == "288036.00"
    protocol_error(outcomes[1], "has no answer for this task")
    protocol_error(outcomes[2], "has no answer for this task")
    protocol_error(outcomes[3], "answers this task twice")
    protocol_error(outcomes[4], "answers this task twice")
    protocol_error(outcomes[5], "over 2048")
    protocol_error(outcomes[6], "does not match the schema (result.status: literal_error)")


async def test_a_batch_answer_that_is_not_json_fails_the_tasks_of_that_batch(
    node_agent: StartNode,
) -> None:
    service = node_agent(fault="garbage", methods="run_batch")
    agent = remote(service.url)
    try:
        outcomes = await run_together(agent, [ORDER, ORDER, ORDER])
    finally:
        await agent.aclose()
    for outcome in outcomes:
        protocol_error(outcome, "response refused")


async def test_a_task_the_service_refuses_in_a_batch_fails_alone(node_agent: StartNode) -> None:
    """A per-task problem is that task's answer, with the meaning of its status (a 422:
    invalid input, not retried), beside the others' results."""
    service = node_agent(methods="run_batch")
    agent = remote(service.url)
    try:
        outcomes = await run_together(agent, [ORDER, {**ORDER, "quantity": 0}, ORDER])
    finally:
        await agent.aclose()
    assert isinstance(outcomes[0], Result) and isinstance(outcomes[2], Result)
    assert outcomes[0].status is outcomes[2].status is ResultStatus.SUCCESS
    assert type(outcomes[1]).__name__ == "InvalidInput", outcomes[1]
    assert "run: HTTP 422: quantity" in str(outcomes[1])


async def test_a_batch_leaves_when_full_or_after_its_wait(node_agent: StartNode) -> None:
    """``max_tasks`` sends a batch at once; a task alone leaves after ``max_wait_ms``."""
    service = node_agent(methods="run_batch")
    agent = remote(service.url, batch={"max_tasks": 3, "max_wait_ms": 50, "max_requests": 3})
    try:
        outcomes = await run_together(agent, [ORDER] * 7)  # 3 + 3 at once, then 1 waits
        assert all(isinstance(r, Result) and r.status is ResultStatus.SUCCESS for r in outcomes)
        sizes: dict[object, int] = {}
        for call in service.calls():
            sizes[call["request"]] = sizes.get(call["request"], 0) + 1
        assert sorted(sizes.values()) == [1, 3, 3]
    finally:
        await agent.aclose()


async def test_a_number_refused_in_one_answer_of_a_batch_fails_that_task_only(
    node_agent: StartNode,
) -> None:
    """A NaN in one task's answer (JSON has no NaN; the strict read refuses it) fails that
    task alone: the rest of the body is well-formed, so the others keep their results."""
    service = node_agent(methods="run_batch")
    agent = remote(service.url)
    try:
        outcomes = await run_together(agent, [ORDER, {**ORDER, "batch": "nan"}, ORDER])
    finally:
        await agent.aclose()
    assert len({c["request"] for c in service.calls()}) == 1  # one request
    assert all(isinstance(outcomes[i], Result) and outcomes[i].ok for i in (0, 2)), outcomes
    protocol_error(outcomes[1], "NaN is not a JSON number")
