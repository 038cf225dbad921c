"""The reference agents (Node, Python) give the in-process RiskAgent's answers, through the
real RemoteAgent adapter over HTTP."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from agents.risk import RiskAgent, contracts
from deepagents.config import FileConfig
from deepagents.config.schema import AgentEntry, RetryPolicy
from deepagents.contract import Result, Task
from deepagents.errors import DeepAgentsError
from deepagents.remote import RemoteAgent, remote_agent_class
from deepagents.worker.agent_calls import AgentRunner
from deepagents.worker.retry import decide
from tests.remote.conftest import Service, StartNode


def orders() -> list[dict[str, Any]]:
    """Valid orders over every symbol, near the 30% line, and orders each rule refuses."""
    rng = random.Random(20)
    out: list[dict[str, Any]] = []
    for symbol in [*contracts(), "NOPE"]:
        for _ in range(6):
            price = f"{rng.uniform(1, 9000):.{rng.randint(0, 6)}f}"
            out.append(
                {
                    "symbol": symbol,
                    "side": rng.choice(["buy", "sell"]),
                    "quantity": rng.randint(1, 50),
                    "price": rng.choice([price, float(price)]),
                    "available_funds": f"{rng.uniform(1e4, 5e6):.2f}",
                }
            )
    # exactly at the limit: 1 × 300 × 1000 × 0.12 = 36,000 = 30% of 120,000
    out.append({"symbol": "IF", "side": "buy", "quantity": 1, "price": "1000",
                "available_funds": "120000"})  # fmt: skip
    base = {"symbol": "IF", "side": "buy", "quantity": 1, "price": "1000.5",
            "available_funds": "100000.00"}  # fmt: skip
    for change in (
        {"side": "hold"},
        {"quantity": 0},
        {"quantity": 1.5},
        {"price": "-1"},
        {"price": "1.1234567"},
        {"available_funds": "1.123"},
        {"extra": 1},
        {"symbol": ""},
        {"urgent": True},
    ):
        out.append({**base, **change})
    return out


async def answer(runner: AgentRunner, task: Task) -> tuple[Any, ...]:
    """What a task's result says, whichever agent ran it: status, error code, output, score."""
    try:
        result: Result = await runner.run(task)
    except DeepAgentsError as exc:
        decision = decide(
            exc, deliveries=1, max_deliveries=5, policy=RetryPolicy(), time_left_ms=None
        )
        return ("failed", decision.code, None, None)
    extra = result.metrics.__pydantic_extra__ or {}
    return (result.status.value, None, result.output, extra.get("risk_score"))


@pytest.fixture
async def executor() -> AsyncIterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4) as pool:
        yield pool


def remote(url: str) -> RemoteAgent:
    entry = FileConfig.model_validate(
        {"agents": {"risk-x": {"intents": ["risk_check"], "remote": {"url": url}}}}
    ).agents["risk-x"]
    assert isinstance(entry, AgentEntry)
    return remote_agent_class("risk-x", entry)()


async def same_answers(service: Service, executor: ThreadPoolExecutor) -> None:
    local = AgentRunner(RiskAgent(), executor)
    agent = remote(service.url)
    over_http = AgentRunner(agent, executor)
    try:
        checked = 0
        for payload in orders():
            task = Task(intent="risk_check", payload=payload)
            expected = await answer(local, task)
            assert await answer(over_http, task) == expected, payload
            checked += expected[0] == "success"
        assert checked > 50  # most orders are valid: the comparison is not of errors only
    finally:
        await agent.aclose()


async def test_the_node_agent_answers_as_the_python_risk_agent(
    node_agent: StartNode, executor: ThreadPoolExecutor
) -> None:
    await same_answers(node_agent(), executor)


async def test_the_python_reference_agent_answers_as_the_risk_agent(
    python_agent: Service, executor: ThreadPoolExecutor
) -> None:
    await same_answers(python_agent, executor)
