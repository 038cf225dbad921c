"""A waiting task holds no worker slot (DESIGN.md, "Waiting for a human"): with 2,000 tasks
of one agent waiting for replies and its p2 pool at 100, the agent's other p2 tasks still
run: were a waiting task to keep its slot, the pool would be full twenty times over and none
would (their rate beside waiting tasks is measured in loadtests/bench_waiting.py, not
timed here). A worker killed with -9 while they wait loses nothing:
replies go to Redis, and the next worker resumes the tasks. Real worker processes."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest
from redis.asyncio import Redis

from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from tests.e2e.conftest import registered
from tests.support.asking import CONFIG
from tests.support.procs import Procs
from tests.support.wait import eventually

WAITING = 2_000
WORK = 1_000
SHARDS = 2


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "deepagents.yaml"
    path.write_text(CONFIG)
    return path


async def _drain(orch: Orchestrator, n: int) -> None:
    """``n`` 20 ms tasks, submitted at once, each run to success."""
    handles = []
    for i in range(0, n, 500):
        batch = [Task(intent="mixed", payload={"sleep_ms": 20}) for _ in range(min(500, n - i))]
        handles += await orch.submit_many(batch)
    results = await asyncio.gather(*(h.result(timeout=120) for h in handles))
    assert all(r.status is ResultStatus.SUCCESS for r in results)


async def _waiting(client: Redis, prefix: str) -> int:
    return sum([int(await client.zcard(f"{prefix}:{{mixed:{s}}}:waiting")) for s in range(SHARDS)])


async def test_waiting_tasks_hold_no_slot_and_survive_a_kill(
    procs: Procs, orch: Orchestrator, client: Redis, prefix: str
) -> None:
    victim = procs.worker("tests.support.asking:MixedAgent")
    await registered(client, prefix, "mixed", 1)
    await _drain(orch, 200)  # the worker runs p2 tasks before anything waits

    asks = []
    for _ in range(WAITING // 500):
        asks += await orch.submit_many(
            [Task(intent="mixed", payload={"ask": True}) for _ in range(500)]
        )

    async def all_parked() -> bool:
        return await _waiting(client, prefix) == WAITING

    await eventually(all_parked, timeout=120, what=f"{WAITING} tasks waiting")
    # Waiting, nothing of theirs is pending in a stream: no entry, no slot.
    for shard in range(SHARDS):
        pending = await client.xpending(f"{prefix}:{{mixed:{shard}}}:p2", "mixed")
        assert pending["pending"] == 0
    await _drain(orch, WORK)  # beside 2,000 waiting: the pool of 100 is free

    # kill -9 while they wait; the replies land with no worker up, the next one resumes them
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    for h in asks[:200]:
        await orch.reply(h.task_id, {"approved": True})
    procs.worker("tests.support.asking:MixedAgent")
    results = await asyncio.gather(*(h.result(timeout=120) for h in asks[:200]))
    assert all(r.output == {"approved": True} for r in results)
    assert await _waiting(client, prefix) == WAITING - 200
