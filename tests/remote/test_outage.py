"""The service down: the circuit opens for the whole fleet, tasks wait and retry, and a task
that waited more times than its ``max_deliveries`` is not dead-lettered (a wait is not a
delivery). The service back: they finish. Two real worker processes, the real Node agent,
killed and started again on its port."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from deepagents._internal.redis_server import free_port
from deepagents.config import Settings, load_config
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from deepagents.transport.keys import Keys
from tests.e2e.conftest import assert_committed_once, committed_events, registered, worker_procs
from tests.remote.conftest import StartNode, remote_config, stop
from tests.support.replies import entries
from tests.support.wait import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
TASKS = 60
SHARDS = 2
# Five deliveries at 50 to 200 ms of backoff take well under a second: without the wait,
# every task would be dead-lettered long before the service comes back.
MAX_DELIVERIES = 5
BREAKER = "{min_calls: 3, failure_rate: 0.5, window_s: 10, cooldown_s: 1}"


def order(i: int) -> dict[str, object]:
    return {"symbol": "IF", "side": "buy", "quantity": 1 + i % 40, "price": f"{3000 + i}.5",
            "available_funds": "5000000.00"}  # fmt: skip


async def outbox(client: Redis, prefix: str, kind: str) -> list[dict[str, Any]]:
    """Every audit event of one type the workers wrote, both shards."""
    found = []
    for shard in range(SHARDS):
        for _, fields in await entries(client, f"{prefix}:{{risk-node:{shard}}}:audit"):
            found += [e for e in orjson.loads(fields[b"events"]) if e["type"] == kind]
    return found


async def test_the_service_down_opens_the_circuit_for_the_fleet_and_tasks_wait_then_finish(
    node_agent: StartNode,
    tmp_path: Path,
    redis_url: str,
    prefix: str,
    client: Redis,
    settings: Settings,
) -> None:
    port = free_port()
    service = node_agent(port=port)
    path = tmp_path / "config.yaml"
    path.write_text(
        remote_config(service.url, max_deliveries=MAX_DELIVERIES, timeout_s=2, breaker=BREAKER)
    )
    procs = worker_procs(redis_url, prefix, path, DEEPAGENTS_HEALTH_INTERVAL_S="0.5")
    breaker = Keys(prefix).remote_breaker("risk-node")
    try:
        for _ in range(2):
            procs.cli("worker", "--remote", "risk-node")
        await registered(client, prefix, "risk-node", 2)
        async with Orchestrator.from_client(
            client, config=load_config(path), settings=settings
        ) as orch:
            stop(service)  # killed: connections refused from now on
            handles = await orch.submit_many(
                [Task(intent="risk_check", payload=order(i)) for i in range(TASKS)]
            )

            async def opened() -> bool:
                return await client.hget(breaker, "state") in (b"open", b"half_open")

            await eventually(opened, timeout=60, what="the circuit open")

            dlqs = [Keys(prefix).shard("risk-node", s).dlq for s in range(SHARDS)]

            async def waited_past_max_deliveries() -> Counter[str]:
                # Some task waited more times than it may be delivered, in both worker
                # processes: waits do not count as deliveries. A dead letter meanwhile
                # fails the test at once.
                assert [await client.xlen(q) for q in dlqs] == [0] * SHARDS, "dead-lettered"
                waits = await outbox(client, prefix, "waited")
                by_worker = Counter(str(e["consumer"]) for e in waits)
                most = max(Counter(str(e["task_id"]) for e in waits).values(), default=0)
                return by_worker if most > MAX_DELIVERIES and len(by_worker) == 2 else Counter()

            by_worker = await eventually(
                waited_past_max_deliveries, timeout=120, what="a task waiting past its deliveries"
            )
            dead = [await client.xlen(q) for q in dlqs]
            assert dead == [0, 0], f"dead-lettered during the outage (waits: {by_worker})"
            down = await _status(procs)
            assert down["circuit"] in ("open", "half_open"), down
            assert down["healthy"] == 0 and down["detail"].startswith("remote service:"), down

            node_agent(port=port)  # the service is back, on the same port
            results = await asyncio.gather(*(h.result(timeout=120) for h in handles))
    finally:
        procs.close()

    assert all(r.status is ResultStatus.SUCCESS for r in results), [
        r.error for r in results if r.error
    ][:3]
    # Only the calls that reached a dead service count: never the waits.
    assert max(r.metrics.attempts for r in results) < MAX_DELIVERIES
    committed = await committed_events(client, prefix, "risk-node", SHARDS)
    assert_committed_once(committed, [h.task_id for h in handles])
    assert await client.hget(breaker, "state") == b"closed"  # the probe closed it
    assert [await client.xlen(q) for q in dlqs] == [0, 0]


async def _status(procs: Any) -> dict[str, Any]:
    """``deepagents status``'s view of the agent, once its health shows the outage."""

    async def unhealthy() -> dict[str, Any] | None:
        done = await asyncio.to_thread(
            procs.run, "status", "--watch", "--json", "--iterations", "1"
        )
        assert done.returncode == 0, done.stderr
        health: dict[str, Any] = orjson.loads(done.stdout)["health"]["risk-node"]
        return health if health["healthy"] == 0 and health["detail"] else None

    found = await eventually(unhealthy, timeout=60, interval=0.5, what="status naming it")
    assert found is not None
    return found
