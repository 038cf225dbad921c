"""Real worker processes (``deepagents worker --remote``) over the real Node agent playing a
faulty service: retries, Retry-After, deadlines, protocol errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from deepagents.config import Settings, load_config
from deepagents.contract import Result, ResultStatus, Task
from deepagents.contract.task import utcnow
from deepagents.orchestrator import Orchestrator
from tests.e2e.conftest import committed_events, registered, worker_procs
from tests.remote.conftest import Service, StartNode, remote_config
from tests.support.procs import Procs
from tests.support.wait import eventually_sync

ORDER = {"symbol": "IF", "side": "buy", "quantity": 2, "price": "4000.5",
         "available_funds": "1000000.00"}  # fmt: skip
Fleet = Callable[..., Any]


@pytest.fixture
async def fleet(
    tmp_path: Path, redis_url: str, prefix: str, client: Redis, settings: Settings
) -> AsyncIterator[Fleet]:
    """``async with fleet(service, workers=1, **remote_options) as (orch, procs)``."""
    opened: list[Procs] = []

    @asynccontextmanager
    async def start(
        service: Service, workers: int = 1, **remote: Any
    ) -> AsyncIterator[tuple[Orchestrator, Procs]]:
        path = tmp_path / f"config-{len(opened)}.yaml"
        path.write_text(remote_config(service.url, **remote))
        procs = worker_procs(redis_url, prefix, path)
        opened.append(procs)
        for _ in range(workers):
            procs.cli("worker", "--remote", "risk-node")
        await registered(client, prefix, "risk-node", workers)
        async with Orchestrator.from_client(
            client, config=load_config(path), settings=settings
        ) as orch:
            yield orch, procs

    yield start
    for procs in opened:
        procs.close()


async def run_one(orch: Orchestrator, **task: Any) -> Result:
    handle = await orch.submit(Task(intent="risk_check", payload=ORDER, **task))
    return await handle.result(timeout=60)


async def test_500_twice_then_200_gives_one_result_after_three_attempts(
    node_agent: StartNode, fleet: Fleet, client: Redis, prefix: str
) -> None:
    service = node_agent("status500:2")
    async with fleet(service) as (orch, _):
        result = await run_one(orch)
    assert result.status is ResultStatus.SUCCESS, result
    assert result.output["margin"] == "288036.00"
    assert result.metrics.attempts == 3
    calls = service.calls("execute")
    assert [c["attempt"] for c in calls] == [1, 2, 3]
    assert [c["key"] for c in calls] == [f"{result.task_id}:{n}" for n in (1, 2, 3)]
    committed = await committed_events(client, prefix, "risk-node", 2)
    assert len(committed[str(result.task_id)]) == 1


async def test_a_429_with_retry_after_2_is_retried_no_sooner_than_2_s_later(
    node_agent: StartNode, fleet: Fleet
) -> None:
    service = node_agent("retry_after:2")
    async with fleet(service) as (orch, _):
        result = await run_one(orch)
    assert result.status is ResultStatus.SUCCESS, result
    first, second = service.calls("execute")
    assert (first["attempt"], second["attempt"]) == (1, 2)
    # the backoff alone is at most 200 ms here: the wait is the service's
    assert int(str(second["at_ms"])) - int(str(first["at_ms"])) >= 2000


async def test_a_service_slower_than_the_deadline_is_deadline_exceeded_and_leaks_no_connection(
    node_agent: StartNode, fleet: Fleet
) -> None:
    service = node_agent("slow:600000")  # tasks with a deadline are never answered in time
    async with fleet(service, max_connections=2) as (orch, _):
        deadline = utcnow() + timedelta(seconds=2)
        slow = await asyncio.gather(*(run_one(orch, deadline=deadline) for _ in range(6)))
        assert {r.error.code for r in slow if r.error} == {"deadline_exceeded"}
        assert all(r.status is ResultStatus.FAILED for r in slow)
        for call in service.calls("execute"):
            assert 0 <= int(str(call["time_left_ms"])) <= 2000
        # Each abandoned call closed its connection at once (the service would answer in
        # ten minutes): none is pending, the service holds at most the pool's two, and the
        # pool still serves.
        eventually_sync(lambda: service.stats()["pending"] == 0, timeout=5, what="calls closed")
        assert service.stats()["open"] <= 2
        after = await asyncio.gather(*(run_one(orch) for _ in range(4)))
    assert all(r.status is ResultStatus.SUCCESS for r in after), after
    assert service.stats()["open"] <= 2


async def test_a_cancelled_running_task_aborts_its_call_to_the_service_and_ends_once(
    node_agent: StartNode, fleet: Fleet, client: Redis, prefix: str
) -> None:
    service = node_agent("slow:600000")  # holds the call until its client hangs up
    async with fleet(service, timeout_s=300) as (orch, _):
        handle = await orch.submit(
            Task(intent="risk_check", payload=ORDER, deadline=utcnow() + timedelta(minutes=5))
        )
        eventually_sync(lambda: service.stats()["pending"] == 1, timeout=30, what="the call")
        assert await orch.cancel(str(handle.task_id)) == "ok"
        result = await handle.result(timeout=30)
        # The worker's call was aborted (its connection closed): the service stopped the work.
        eventually_sync(lambda: service.stats()["aborted"] == 1, timeout=30, what="abort")
        assert [c["task"] for c in service.calls("aborted")] == [str(handle.task_id)]
        assert service.stats()["pending"] == 0
        assert await orch.cancel(str(handle.task_id)) == "done"
        committed = await committed_events(client, prefix, "risk-node", 2)
    assert result.error is not None and result.error.code == "cancelled"
    assert [(e["type"], e.get("reason")) for e in committed[str(handle.task_id)]] == [
        ("failed", "cancelled")
    ]
    assert len(service.calls("execute")) == 1  # never run again


@pytest.mark.parametrize(
    ("fault", "options", "says"),
    [
        ("garbage", {}, "this is {not json password=[REDACTED]"),
        ("content_type", {}, "text/html"),
        ("huge:10485760", {}, "over 1048576 bytes"),
        ("huge:4000", {"max_response_bytes": 2048}, "over 2048 bytes"),
    ],
)
async def test_a_malformed_answer_is_a_remote_protocol_error_with_its_first_bytes_audited(
    node_agent: StartNode,
    fleet: Fleet,
    client: Redis,
    prefix: str,
    fault: str,
    options: dict[str, object],
    says: str,
) -> None:
    service = node_agent(fault)
    async with fleet(service, **options) as (orch, _):
        result = await run_one(orch)
    assert result.status is ResultStatus.FAILED
    assert result.error is not None and result.error.code == "remote_protocol_error"
    assert says in result.error.message
    assert result.metrics.attempts == 1  # not retried: the same answer would come back
    (event,) = (await committed_events(client, prefix, "risk-node", 2))[str(result.task_id)]
    assert says in event["result"]["error"]["message"]
    assert "hunter2" not in result.error.message  # the garbage body holds password=hunter2


@pytest.mark.parametrize(
    ("methods", "called"),
    [
        ("", {"can_handle", "prepare_context", "execute", "post_process"}),
        ("execute", {"execute"}),
        ("prepare_context,execute", {"prepare_context", "execute"}),
    ],
)
async def test_the_worker_calls_only_the_methods_the_service_says_it_implements(
    node_agent: StartNode, fleet: Fleet, methods: str, called: set[str]
) -> None:
    """A service's /v1/health may list the contract methods it implements; the others are
    not called (each would be a round trip that changes nothing), and its tasks still
    succeed. Without a list, all four are called, as before."""
    service = node_agent(methods=methods)
    async with fleet(service) as (orch, _):
        results = [await run_one(orch) for _ in range(3)]
    for result in results:
        assert result.status is ResultStatus.SUCCESS, result.error
        assert result.output["approved"] is True
    assert {str(call["step"]) for call in service.calls()} == called
    assert len(service.calls("execute")) == 3


async def test_a_redirect_is_not_followed_and_a_cookie_not_sent_back(
    node_agent: StartNode, fleet: Fleet
) -> None:
    """Where a worker connects comes from the configuration alone: a 302 is an answer
    outside the protocol, not a new address, and a cookie the service sets is not sent on
    later calls (one could steer or link them)."""
    service = node_agent("redirect")
    # By name: a cookie jar keeps no cookies of a bare IP address, so this is the case
    # where sending one back could happen at all.
    service.url = service.url.replace("127.0.0.1", "localhost")
    async with fleet(service) as (orch, _):
        first = await run_one(orch)
        second = await run_one(orch)
    for result in (first, second):
        assert result.status is ResultStatus.FAILED
        assert result.error is not None and result.error.code == "remote_protocol_error"
        assert "unexpected HTTP 302" in result.error.message
    stats = service.stats()
    assert len(service.calls("execute")) == 2
    assert stats["elsewhere"] == 0, stats
    assert stats["cookies"] == 0, stats


async def test_the_response_limit_is_configurable(node_agent: StartNode, fleet: Fleet) -> None:
    service = node_agent("huge:10485760")
    async with fleet(service, max_response_bytes=16777216) as (orch, _):
        result = await run_one(orch)
    assert result.status is ResultStatus.SUCCESS, result.error
    assert len(result.output) == 10485760


async def test_results_and_audit_carry_the_version_the_service_reports(
    node_agent: StartNode,
    fleet: Fleet,
    client: Redis,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The version is the service's, from its health answer, not "0": on the result, its
    audit event and the worker's registry entry."""
    monkeypatch.setenv("RISK_AGENT_VERSION", "2.3.1-rc.1")  # the service's environment
    service = node_agent()
    async with fleet(service) as (orch, _):
        result = await run_one(orch)
        versions = await client.hgetall(f"{prefix}:agent:risk-node:versions")
    assert result.agent_version == "2.3.1-rc.1", result
    (event,) = (await committed_events(client, prefix, "risk-node", 2))[str(result.task_id)]
    assert event["agent_version"] == "2.3.1-rc.1"
    assert set(versions.values()) == {b"2.3.1-rc.1"}, versions
