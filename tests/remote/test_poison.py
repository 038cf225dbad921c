"""One poison payload among healthy traffic: the Node agent answers 500 to every call of one
order and serves the others. Traffic is light (one healthy task per delivery of the poison
task), so the poison's failures are as many as the window's successes: a breaker counting
failed calls would open for everyone. Counting failing tasks, it stays closed; the poison
task goes through its own deliveries to the dead-letter stream, and no healthy task waits."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis

from deepagents.config import Settings, load_config
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from deepagents.transport.keys import Keys
from tests.e2e.conftest import registered, worker_procs
from tests.remote.conftest import StartNode, remote_config
from tests.remote.test_outage import outbox
from tests.support.replies import entries
from tests.support.wait import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
SHARDS = 2
MAX_DELIVERIES = 5
POISON = "POISON"
ORDER = {"symbol": "IF", "side": "buy", "quantity": 2, "price": "4000.5",
         "available_funds": "1000000.00"}  # fmt: skip


async def test_one_poison_task_is_dead_lettered_alone_and_the_circuit_stays_closed(
    node_agent: StartNode,
    tmp_path: Path,
    redis_url: str,
    prefix: str,
    client: Redis,
    settings: Settings,
) -> None:
    service = node_agent(f"poison:{POISON}")
    path = tmp_path / "config.yaml"
    path.write_text(remote_config(service.url, max_deliveries=MAX_DELIVERIES, timeout_s=2))
    procs = worker_procs(redis_url, prefix, path)
    keys = Keys(prefix)
    breaker = keys.remote_breaker("risk-node")
    dlqs = [keys.shard("risk-node", s).dlq for s in range(SHARDS)]
    healthy = []
    try:
        for _ in range(2):
            procs.cli("worker", "--remote", "risk-node")
        await registered(client, prefix, "risk-node", 2)
        async with Orchestrator.from_client(
            client, config=load_config(path), settings=settings
        ) as orch:
            poison = await orch.submit(
                Task(intent="risk_check", payload={**ORDER, "symbol": POISON})
            )
            for delivery in range(1, MAX_DELIVERIES + 1):

                async def reached(n: int = delivery) -> bool:
                    calls = service.calls("execute")
                    return sum(c["task"] == poison.task_id for c in calls) >= n

                await eventually(reached, timeout=60, what=f"the poison's delivery {delivery}")
                # One healthy task after each of the poison's failures, run to its end.
                handle = await orch.submit(Task(intent="risk_check", payload=ORDER))
                healthy.append((handle.task_id, await handle.result(timeout=60)))

            async def dead() -> list[tuple[bytes, dict[bytes, bytes]]]:
                return [e for q in dlqs for e in await entries(client, q)]

            letters = await eventually(dead, timeout=60, what="the poison dead-lettered")
            poisoned = await poison.result(timeout=30)
    finally:
        procs.close()

    ((_, letter),) = letters
    assert orjson.loads(letter[b"orig_task"])["task_id"] == poison.task_id, letter
    assert letter[b"reason"] == b"max_deliveries", letter
    assert poisoned.status is ResultStatus.FAILED
    executes = service.calls("execute")
    assert sum(c["task"] == poison.task_id for c in executes) == MAX_DELIVERIES
    # The circuit never opened: no opening was ever recorded.
    assert await client.hget(breaker, "opened_at") is None
    assert await client.hget(breaker, "state") in (None, b"closed")
    # The healthy tasks were not held back: each ran once, at its first delivery, never
    # refused, and none waited for a circuit.
    assert [r.status for _, r in healthy] == [ResultStatus.SUCCESS] * MAX_DELIVERIES
    assert [r.metrics.attempts for _, r in healthy] == [1] * MAX_DELIVERIES
    ran = [str(c["task"]) for c in executes if c["task"] != poison.task_id]
    assert sorted(ran) == sorted(t for t, _ in healthy)
    assert await outbox(client, prefix, "waited") == []
