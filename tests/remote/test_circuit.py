"""The fleet's circuit breaker of a remote service, with two RemoteAgents on two Redis
connections playing two workers, against the real Node agent: one's failures open the
circuit for the other, half-open lets one trial through, and a refused task waits (not
counted) only until its deadline and max_wait_s."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from redis.asyncio import Redis

from deepagents.config import FileConfig
from deepagents.config.schema import RetryPolicy
from deepagents.contract import Task
from deepagents.contract.task import utcnow
from deepagents.errors import CircuitOpen, ErrorCode
from deepagents.remote import RemoteAgent, remote_agent_class
from deepagents.remote.errors import ServiceDown
from deepagents.store import breaker
from deepagents.store.breaker import BreakerState, Permit
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams import connect
from deepagents.worker.retry import decide
from tests.remote.conftest import StartNode
from tests.support.replies import as_bytes
from tests.support.wait import eventually

ORDER = {"symbol": "IF", "side": "buy", "quantity": 2, "price": "4000.5",
         "available_funds": "1000000.00"}  # fmt: skip
BREAKER = {"min_calls": 3, "failure_rate": 0.5, "window_s": 30, "cooldown_s": 1,
           "state_cache_s": 0, "max_wait_s": 600}  # fmt: skip


def agent_class(url: str) -> type[RemoteAgent]:
    remote = {"url": url, "timeout_s": 5, "breaker": BREAKER}
    config = FileConfig.model_validate(
        {"agents": {"risk-node": {"intents": ["risk_check"], "remote": remote}}}
    )
    return remote_agent_class("risk-node", config.agents["risk-node"])


async def attempt(agent: RemoteAgent, task: Task) -> Any:
    """The contract's calls in the worker's order, up to execute's answer."""
    await agent.can_handle(task)
    return await agent.execute(await agent.prepare_context(task))


@pytest.fixture
async def second_client(redis_url: str) -> AsyncIterator[Redis]:
    """Another connection to Redis: the other worker process's."""
    other = connect(redis_url)
    yield other
    await other.aclose()


async def test_one_workers_failures_open_the_circuit_for_every_worker_and_one_probe_closes_it(
    node_agent: StartNode, client: Redis, second_client: Redis, prefix: str
) -> None:
    service = node_agent("status500:1")  # each task's first execute answers 500
    cls = agent_class(service.url)
    one, two = cls(redis=client, prefix=prefix), cls(redis=second_client, prefix=prefix)
    task = Task(intent="risk_check", payload=ORDER)
    try:
        # Three tasks fail: the window counts a failure once per task, so three are needed.
        for failing in (
            task,
            Task(intent="risk_check", payload=ORDER),
            Task(intent="risk_check", payload=ORDER),
        ):
            with pytest.raises(ServiceDown, match="HTTP 500"):
                await attempt(one, failing)
        state = await client.hget(Keys(prefix).remote_breaker("risk-node"), "state")
        assert state == b"open"
        calls = len(service.calls())
        # The other worker never saw a failure: it is refused without calling the service.
        with pytest.raises(CircuitOpen) as refused:
            await attempt(two, task)
        assert len(service.calls()) == calls
        assert 0 < refused.value.retry_after_s <= 1.5  # the cool-down, plus some spread

        circuit = two._circuit
        assert circuit is not None

        async def trial() -> Permit | None:  # after the cool-down: one worker gets the trial
            try:
                return await circuit.permit(task, "can_handle", 5)
            except CircuitOpen:
                return None

        probe = await eventually(trial, timeout=10, what="the circuit half-open")
        assert probe is not None and probe.probe
        with pytest.raises(CircuitOpen):  # while that trial runs, nobody else calls
            await attempt(one, task)
        # A trial the task's deadline cut short heard no answer: open for another cool-down.
        await circuit.record(probe, task, "execute", TimeoutError("the task's deadline passed"))
        assert await circuit.state() is BreakerState.OPEN
        probe = await eventually(trial, timeout=10, what="the circuit half-open again")
        assert probe is not None and probe.probe
        await circuit.record(probe, task, "can_handle", None)  # the trial answered
        assert await circuit.state() is BreakerState.CLOSED
        result = await attempt(one, task)  # its second execute: answered
        assert result.output["margin"] == "288036.00"
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_service_that_does_not_answer_opens_it_and_health_says_why(
    node_agent: StartNode, client: Redis, prefix: str
) -> None:
    service = node_agent()
    cls = agent_class(service.url)
    service.proc.kill()
    service.proc.wait(10)
    agent = cls(redis=client, prefix=prefix)
    try:
        with pytest.raises(Exception, match="GET /v1/health: ConnectError"):
            await agent.health_check()
        for _ in range(2):
            with pytest.raises(ServiceDown, match="ConnectError"):
                await attempt(agent, Task(intent="risk_check", payload=ORDER))
        # The third opens it: that task waits, its delivery not counted, as if refused.
        with pytest.raises(CircuitOpen, match="circuit of risk-node's service is open"):
            await attempt(agent, Task(intent="risk_check", payload=ORDER))
        with pytest.raises(Exception, match="circuit breaker is open"):
            await agent.health_check()
    finally:
        await agent.aclose()


async def test_a_refused_task_waits_until_max_wait_s_then_its_refusals_count(
    node_agent: StartNode, client: Redis, prefix: str
) -> None:
    opened = {"state": "open", "opened_at": 10**13}  # its cool-down ends in centuries
    await client.hset(Keys(prefix).remote_breaker("risk-node"), mapping=opened)  # type: ignore[arg-type]
    agent = agent_class(node_agent().url)(redis=client, prefix=prefix)
    try:
        young = Task(intent="risk_check", payload=ORDER)
        with pytest.raises(CircuitOpen):
            await agent.can_handle(young)
        old = Task(intent="risk_check", payload=ORDER, created_at=utcnow() - timedelta(hours=1))
        with pytest.raises(ServiceDown, match="has waited max_wait_s"):
            await agent.can_handle(old)
    finally:
        await agent.aclose()


async def test_a_long_wait_is_spread_wider_the_older_the_task(
    node_agent: StartNode, client: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Half a cool-down of spread for a young task; a quarter of its age for an old one, at
    most a minute: a backlog waiting through a long outage is bounced less and less."""
    monkeypatch.setattr(random, "uniform", lambda low, high: high)  # the widest spread
    opened = {"state": "open", "opened_at": 10**13}
    await client.hset(Keys(prefix).remote_breaker("risk-node"), mapping=opened)  # type: ignore[arg-type]
    agent = agent_class(node_agent().url)(redis=client, prefix=prefix)
    try:
        waits = []
        for age_s in (0, 120, 500):
            task = Task(intent="risk_check", payload=ORDER,
                        created_at=utcnow() - timedelta(seconds=age_s))  # fmt: skip
            with pytest.raises(CircuitOpen) as refused:
                await agent.can_handle(task)
            waits.append(refused.value.retry_after_s)
        # cool-down (1 s: the rest of one, capped) plus 0.5 s, 30 s (120 / 4), 60 s (capped)
        assert [round(w, 1) for w in waits] == [1.5, 31.0, 61.0]
    finally:
        await agent.aclose()


@pytest.mark.parametrize("flush_s", [3600.0, 0.0], ids=["pending", "in-the-air"])
async def test_aclose_sends_the_successes_the_window_has_not_seen(
    node_agent: StartNode,
    client: Redis,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    flush_s: float,
) -> None:
    """Successes are counted locally and sent now and then; a worker that stops sends what
    it holds (``pending``: none was due) and waits for the sends already in the air
    (``in-the-air``: each success started one), so the window misses none of its calls."""
    monkeypatch.setattr(breaker, "SUCCESS_FLUSH_S", flush_s)
    agent = agent_class(node_agent().url)(redis=client, prefix=prefix)
    window = Keys(prefix).remote_breaker_window("risk-node")
    try:
        for _ in range(3):
            result = await attempt(agent, Task(intent="risk_check", payload=ORDER))
            assert result.output["margin"] == "288036.00"
        if flush_s:
            assert await client.hlen(window) == 0  # nothing was due: all three held here
    finally:
        await agent.aclose()
    counts = {as_bytes(k).decode(): int(v) for k, v in (await client.hgetall(window)).items()}
    assert sum(n for k, n in counts.items() if k.startswith("o:")) == 3, counts


def test_a_wait_is_not_a_delivery_and_ends_at_the_deadline() -> None:
    policy, rng = RetryPolicy(base_ms=50, max_ms=200), random.Random(1)
    refused = CircuitOpen("open", retry_after_s=2.5)
    wait = decide(
        refused, deliveries=5, max_deliveries=5, policy=policy, time_left_ms=None, rng=rng
    )
    # On the last allowed delivery still a wait, as long as the circuit said, no backoff.
    assert (wait.action, wait.code, wait.delay_ms) == ("wait", ErrorCode.CIRCUIT_OPEN, 2500)
    late = decide(refused, deliveries=1, max_deliveries=5, policy=policy, time_left_ms=2000)
    assert (late.action, late.code) == ("fail", ErrorCode.DEADLINE_EXCEEDED)
    down = decide(
        ServiceDown("gone"), deliveries=5, max_deliveries=5, policy=policy, time_left_ms=None
    )
    assert down.action == "dead_letter"
