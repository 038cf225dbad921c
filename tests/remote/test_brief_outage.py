"""A brief outage of a busy service: the window is full of successes, the Node agent is
killed with ``kill -9`` while two worker processes have calls in flight, and comes back on
its port some seconds later. The breaker's streak (distinct tasks finding the service down,
no success between) opens the circuit at once, whatever the window holds; calls refused or
reset while it opens wait, their deliveries not counted. Nothing is dead-lettered, and every
task succeeds, once, after the service returns."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from redis.asyncio import Redis

from deepagents._internal.redis_server import free_port
from deepagents.config import Settings, load_config
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from deepagents.transport.keys import Keys
from tests.e2e.conftest import assert_committed_once, committed_events, registered, worker_procs
from tests.remote.conftest import StartNode, remote_config, stop
from tests.support.replies import as_bytes
from tests.support.wait import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
SHARDS = 2
MAX_DELIVERIES = 5  # at 50 to 200 ms of backoff: spent in well under a second
BEFORE = 1_200  # tasks run before the outage: their successes fill the window
IN_FLIGHT = 400  # submitted just before the kill: calls in flight when it dies
DURING = 200  # submitted while it is down
OUTAGE_S = 3.0
# The defaults (a 30 s window, min_calls 5, failure_rate 0.5, down_after 5), but a short
# cool-down: the probes that find it still down come every second.
BREAKER = "{cooldown_s: 1}"


def order(i: int) -> dict[str, object]:
    return {"symbol": "IF", "side": "buy", "quantity": 1 + i % 40, "price": f"{3000 + i}.5",
            "available_funds": "5000000.00"}  # fmt: skip


def tasks(n: int, start: int) -> list[Task]:
    return [Task(intent="risk_check", payload=order(start + i)) for i in range(n)]


async def window_successes(client: Redis, prefix: str) -> int:
    window = await client.hgetall(Keys(prefix).remote_breaker_window("risk-node"))
    return sum(int(v) for k, v in window.items() if as_bytes(k).startswith(b"o:"))


async def test_a_brief_outage_of_a_busy_service_dead_letters_nothing(
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
    procs = worker_procs(redis_url, prefix, path)
    keys = Keys(prefix)
    breaker = keys.remote_breaker("risk-node")
    dlqs = [keys.shard("risk-node", s).dlq for s in range(SHARDS)]
    loop = asyncio.get_running_loop()
    try:
        for _ in range(2):
            procs.cli("worker", "--remote", "risk-node")
        await registered(client, prefix, "risk-node", 2)
        async with Orchestrator.from_client(
            client, config=load_config(path), settings=settings
        ) as orch:
            busy = await orch.submit_many(tasks(BEFORE, 0))
            done = await asyncio.gather(*(h.result(timeout=120) for h in busy))
            assert all(r.status is ResultStatus.SUCCESS for r in done)

            async def full() -> int:
                """A worker holds its last successes until its next call (at most 0.25 s of
                them, flushed with the next success after that): on a fast machine two
                workers held enough of the 1,200 to leave the window short. A few more
                tasks, round after round, bring what they hold."""
                n = await window_successes(client, prefix)
                if n >= 1_000:
                    return n
                more = await orch.submit_many(tasks(4, len(busy)))
                busy.extend(more)
                for r in await asyncio.gather(*(h.result(timeout=60) for h in more)):
                    assert r.status is ResultStatus.SUCCESS
                return 0

            before = await eventually(full, timeout=30, what="1,000 successes in the window")

            handles = await orch.submit_many(tasks(IN_FLIGHT, len(busy)))
            executed = len(service.calls("execute"))

            async def started() -> bool:  # the workers are calling it when it dies
                return len(service.calls("execute")) >= executed + 20

            await eventually(started, timeout=30, what="calls of the new tasks under way")
            stop(service)  # kill -9: calls in flight are reset, new ones refused
            down_at = loop.time()
            handles += await orch.submit_many(tasks(DURING, len(busy) + IN_FLIGHT))
            seen_open = False

            async def outage_over() -> bool:
                nonlocal seen_open
                assert [await client.xlen(q) for q in dlqs] == [0] * SHARDS, "dead-lettered"
                state = await client.hget(breaker, "state")
                seen_open = seen_open or state in (b"open", b"half_open")
                return seen_open and loop.time() - down_at >= OUTAGE_S

            await eventually(outage_over, timeout=60, what=f"a {OUTAGE_S:g} s outage")
            node_agent(port=port)  # back, on the same port
            results = await asyncio.gather(*(h.result(timeout=120) for h in handles))
    finally:
        procs.close()

    assert before >= 1_000
    failed = [r.error for r in results if r.status is not ResultStatus.SUCCESS]
    assert not failed, f"{len(failed)} tasks failed, e.g. {failed[:3]}"
    assert [await client.xlen(q) for q in dlqs] == [0] * SHARDS
    committed = await committed_events(client, prefix, "risk-node", SHARDS)
    assert_committed_once(committed, [h.task_id for h in busy + handles])
    # A call that found it down while the circuit opened was not a delivery.
    assert max(r.metrics.attempts for r in results) < MAX_DELIVERIES
