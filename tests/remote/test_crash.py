"""2,000 tasks over two worker processes to the Node agent, one worker killed with -9
mid-run: every task is committed once, and a resent attempt keeps its idempotency key.
The issue's 10,000 run in ``loadtests/remote_crash.py`` (minutes here: docs/benchmarks.md).
The same with batches (``run_batch``): the victim dies with batches in flight, and each
task of those batches is committed once."""

from __future__ import annotations

import asyncio
import signal
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest
from redis.asyncio import Redis

from agents.risk import Order, margin_for
from deepagents.config import Settings, load_config
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from tests.e2e.conftest import assert_committed_once, committed_events, registered, worker_procs
from tests.remote.conftest import StartNode, remote_config
from tests.support.wait import eventually_sync

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
FOUR_CALLS = "can_handle,prepare_context,execute,post_process"


def order(i: int) -> dict[str, object]:
    return {
        "symbol": "IF",
        "side": "buy",
        "quantity": 1 + i % 40,
        "price": f"{3000 + i}.5",
        "available_funds": "5000000.00",
    }


@pytest.mark.parametrize(
    ("methods", "step", "tasks"),
    [(FOUR_CALLS, "execute", 2_000), ("run_batch", "run_batch", 600)],
    ids=["four_calls", "run_batch"],
)
async def test_kill_9_of_one_of_two_workers_commits_every_task_once(
    methods: str,
    step: str,
    tasks: int,
    node_agent: StartNode,
    tmp_path: Path,
    redis_url: str,
    prefix: str,
    client: Redis,
    settings: Settings,
) -> None:
    # Each call answered 20 ms late: whenever the victim is killed it has calls in flight,
    # which the survivor must send again (otherwise a kill between two batches of fast
    # calls could leave nothing to resend, and the test's last check would fail at random).
    service = node_agent(fault="hold:20", methods=methods)
    path = tmp_path / "config.yaml"
    path.write_text(remote_config(service.url))
    procs = worker_procs(redis_url, prefix, path)
    try:
        victim = procs.cli("worker", "--remote", "risk-node")
        procs.cli("worker", "--remote", "risk-node")
        await registered(client, prefix, "risk-node", 2)
        payloads = [
            {
                "symbol": "IF",
                "side": "buy",
                "quantity": 1 + i % 40,
                "price": f"{3000 + i}.5",
                "available_funds": "5000000.00",
            }
            for i in range(tasks)
        ]
        async with Orchestrator.from_client(
            client, config=load_config(path), settings=settings
        ) as orch:
            handles = await orch.submit_many(
                [Task(intent="risk_check", payload=p) for p in payloads]
            )
            eventually_sync(
                lambda: len(service.calls(step)) >= tasks // 5, what="the run under way"
            )
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)
            results = await asyncio.gather(*(h.result(timeout=240) for h in handles))
    finally:
        procs.close()

    assert all(r.status is ResultStatus.SUCCESS for r in results)
    for payload, result in zip(payloads, results, strict=True):
        margin = margin_for(Order.model_validate(payload)).quantize(Decimal("0.01"))
        assert result.output["margin"] == str(margin)
    committed = await committed_events(client, prefix, "risk-node", 2)
    assert_committed_once(committed, [h.task_id for h in handles])
    keys: dict[str, list[str]] = defaultdict(list)
    for call in service.calls(step):
        keys[str(call["task"])].append(str(call["key"]))
    rerun = [t for t, ks in keys.items() if len(ks) > 1]
    assert rerun, "some tasks the killed worker had under way must have been sent again"
    assert all(set(ks) == {f"{t}:1"} for t, ks in keys.items())  # a crash keeps the attempt
    if step == "run_batch":
        per_request: dict[object, int] = defaultdict(int)
        for call in service.calls(step):
            per_request[call["request"]] += 1
        assert max(per_request.values()) > 1  # tasks shared requests, and were sent again
