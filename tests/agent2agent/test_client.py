"""An A2A agent served by the ``a2a-sdk``'s own server (a subprocess, ``sdk_agent.py``) as a
remote agent type (``remote: {protocol: a2a}``), driven by a real worker process
(``deepagents worker --remote``) on Redis: a task's result, the version from the agent's
card, its question (``input-required``) parked through ``ctx.ask`` and answered by a reply,
its failure as a failed result; a service that is not there as the remote wire's error."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from deepagents._internal.redis_server import free_port
from deepagents.config import Settings, load_config
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from deepagents.transport.keys import Keys
from tests.agent2agent.sdk_agent import VERSION
from tests.e2e.conftest import assert_committed_once, committed_events, registered, worker_procs
from tests.remote.conftest import remote_config
from tests.support.procs import REPO
from tests.support.wait import eventually, eventually_sync

AGENT = "risk-a2a"


@contextmanager
def serving(port: int) -> Iterator[str]:
    """The SDK's server on ``port`` (loopback); its URL once its card answers."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.agent2agent.sdk_agent", str(port)], cwd=REPO
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert proc.poll() is None, "the SDK's agent server exited"
        try:
            return httpx.get(f"{url}/.well-known/agent-card.json", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        eventually_sync(up, timeout=30, what="the SDK's A2A server")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def sdk_agent() -> Iterator[str]:
    with serving(free_port()) as url:
        yield url


@asynccontextmanager
async def fleet(
    url: str,
    tmp_path: Path,
    redis_url: str,
    prefix: str,
    client: Redis,
    settings: Settings,
    max_deliveries: int = 2,
    **remote: object,
) -> AsyncIterator[Orchestrator]:
    path = tmp_path / "config.yaml"
    options = {"protocol": "a2a", "timeout_s": 10, **remote}
    path.write_text(remote_config(url, name=AGENT, max_deliveries=max_deliveries, **options))
    procs = worker_procs(redis_url, prefix, path)
    try:
        procs.cli("worker", "--remote", AGENT)
        await registered(client, prefix, AGENT, 1)
        async with Orchestrator.from_client(
            client, config=load_config(path), settings=settings
        ) as orch:
            yield orch
    finally:
        procs.close()


async def test_a_worker_drives_an_agent_on_the_sdk_s_own_server(
    sdk_agent: str, tmp_path: Path, redis_url: str, prefix: str, client: Redis, settings: Settings
) -> None:
    async with fleet(sdk_agent, tmp_path, redis_url, prefix, client, settings) as orch:
        echoed = await (await orch.submit(Task(intent="risk_check", payload={"n": 7}))).result(
            timeout=60
        )
        assert echoed.status is ResultStatus.SUCCESS, echoed
        assert echoed.output == {"echo": {"n": 7}, "intent": "risk_check"}
        assert echoed.agent_version == VERSION  # the agent card's

        failed = await (
            await orch.submit(Task(intent="risk_check", payload={"fail": "limit breached"}))
        ).result(timeout=60)
        assert failed.status is ResultStatus.FAILED, failed
        assert failed.error is not None and failed.error.code == "agent_error"
        assert "limit breached" in failed.error.message

        # input-required: the task parks on ctx.ask; the reply is the A2A task's next message
        asking = await orch.submit(Task(intent="risk_check", payload={"ask": True, "amount": 12}))

        async def waiting() -> dict[str, Any] | None:
            info = await orch.lookup(asking.task_id)
            return info if info is not None and info.get("state") == "waiting" else None

        info = await eventually(waiting, timeout=60, what="the task waits for a reply")
        assert info is not None and info["question"] == "which currency?", info
        await orch.reply(asking.task_id, "EUR")
        answered = await asking.result(timeout=60)
        assert answered.status is ResultStatus.SUCCESS, answered
        assert answered.output == {"amount": 12, "currency": "EUR"}
        committed = await committed_events(client, prefix, AGENT, 2)
        assert [e["type"] for e in committed[asking.task_id]] == ["succeeded"]


async def test_a_service_that_is_not_there_is_retried_then_dead_lettered(
    tmp_path: Path, redis_url: str, prefix: str, client: Redis, settings: Settings
) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    async with fleet(nowhere, tmp_path, redis_url, prefix, client, settings) as orch:
        result = await (await orch.submit(Task(intent="risk_check", payload={}))).result(timeout=60)
    assert result.status is ResultStatus.FAILED and result.error is not None
    assert result.error.code == "dead_lettered", result
    assert "ConnectError" in result.error.message and "127.0.0.1" not in result.error.message


async def test_a_service_down_opens_the_fleet_s_circuit_and_its_tasks_wait_for_it(
    tmp_path: Path, redis_url: str, prefix: str, client: Redis, settings: Settings
) -> None:
    """The remote agents' own breaker: tasks sent while the A2A service is not there open
    the circuit and wait, not dead-lettered whatever their deliveries; the service started
    on its port, every task succeeds once."""
    port = free_port()
    breaker = Keys(prefix).remote_breaker(AGENT)
    dlqs = [Keys(prefix).shard(AGENT, s).dlq for s in range(2)]
    async with fleet(
        f"http://127.0.0.1:{port}",
        tmp_path,
        redis_url,
        prefix,
        client,
        settings,
        max_deliveries=3,
        breaker="{min_calls: 3, failure_rate: 0.5, window_s: 10, cooldown_s: 1}",
    ) as orch:
        handles = await orch.submit_many(
            [Task(intent="risk_check", payload={"n": i}) for i in range(8)]
        )

        async def opened() -> bool:
            return await client.hget(breaker, "state") in (b"open", b"half_open")

        await eventually(opened, timeout=60, what="the circuit open")
        with serving(port):
            results = [await h.result(timeout=120) for h in handles]
        assert [await client.xlen(q) for q in dlqs] == [0, 0]
    assert [r.output for r in results] == [
        {"echo": {"n": i}, "intent": "risk_check"} for i in range(8)
    ], [r.error for r in results]
    committed = await committed_events(client, prefix, AGENT, 2)
    assert_committed_once(committed, [h.task_id for h in handles])
