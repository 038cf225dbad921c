"""Effectively once: worker crashes, pauses and redeliveries never lose or double-commit."""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from pathlib import Path

import pytest
from redis.asyncio import Redis

from deepagents.config import FileConfig, Settings
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from deepagents.worker import Worker
from tests.agents import LabAgent
from tests.e2e.conftest import (
    E2E_CONFIG,
    assert_committed_once,
    committed_events,
    kill_9_mid_run,
    registered,
    runs,
)
from tests.support.procs import Procs
from tests.support.replies import Fields
from tests.support.wait import eventually

pytestmark = pytest.mark.slow


async def test_10k_tasks_two_worker_processes_commit_exactly_once(
    client: Redis, orch: Orchestrator, procs: Procs, prefix: str
) -> None:
    procs.worker("tests.agents:LabAgent")
    procs.worker("tests.agents:LabAgent")
    await registered(client, prefix, "lab", 2)
    handles = []
    for start in range(0, 10_000, 500):
        batch = [Task(intent="lab", payload={"n": i}) for i in range(start, start + 500)]
        handles += await orch.submit_many(batch)
    results = await asyncio.gather(*(h.result(timeout=120) for h in handles))

    assert all(r.status is ResultStatus.SUCCESS for r in results)
    assert sorted(r.output["n"] for r in results) == list(range(10_000))
    pids = Counter(r.output["pid"] for r in results)
    assert len(pids) == 2, f"both worker processes should have worked: {pids}"
    committed = await committed_events(client, prefix, "lab", 2)
    assert_committed_once(committed, [h.task_id for h in handles])
    assert len(committed) == 10_000


async def test_kill_9_mid_run_reclaims_in_flight_tasks(
    client: Redis, orch: Orchestrator, procs: Procs, prefix: str
) -> None:
    await kill_9_mid_run(client, orch, procs, prefix, shards=2)


async def test_redelivered_message_is_not_committed_twice(
    client: Redis, config: FileConfig, settings: Settings, orch: Orchestrator, prefix: str
) -> None:
    agent = LabAgent(client, prefix)
    worker = Worker.from_client(agent, client=client, config=config, settings=settings)
    running = asyncio.create_task(worker.run())
    await worker.ready.wait()
    try:
        handle = await orch.submit(Task(intent="lab", payload={"n": 1}))
        await handle.result(timeout=30)
        # Simulate a redelivery: the same message body appears on the stream again.
        stream = f"{prefix}:{{lab:{handle.shard}}}:{handle.tier}"
        first = await client.xrange(f"{prefix}:{{lab:{handle.shard}}}:audit")
        assert first
        task = Task(intent="lab", payload={"n": 1}, task_id=handle.task_id)
        from deepagents.contract.codec import encode_task

        body: Fields = {"task": encode_task(task), "attempt": 1, "enq": 0, "reply": ""}
        await client.xadd(stream, body)
        await client.xadd(stream, body)

        async def acked() -> bool:
            return worker.stats.duplicates >= 2 and await client.xlen(stream) == 0

        await eventually(acked, timeout=30, what="the copies to be acked as duplicates")
    finally:
        worker.stop()
        await running
    committed = await committed_events(client, prefix, "lab", 2)
    assert_committed_once(committed, [handle.task_id])
    assert [t for t, _ in await runs(client, prefix)] == [handle.task_id], "ran exactly once"
    assert worker.stats.committed == 1


async def test_concurrent_duplicate_deliveries_commit_once(
    client: Redis, config: FileConfig, settings: Settings, prefix: str
) -> None:
    """Two copies read in one batch both run (at least once), but only one commits."""
    from deepagents.contract.codec import encode_task

    task = Task(intent="lab", payload={"sleep": 0.2})
    orch = Orchestrator.from_client(client, config=config, settings=settings)
    shard = orch.router.route(task).shard
    stream = f"{prefix}:{{lab:{shard}}}:p2"
    body: Fields = {"task": encode_task(task), "attempt": 1, "enq": 0, "reply": ""}
    await client.xadd(stream, body)
    await client.xadd(stream, body)
    worker = Worker.from_client(
        LabAgent(client, prefix), client=client, config=config, settings=settings
    )
    running = asyncio.create_task(worker.run())
    try:

        async def settled() -> bool:
            return worker.stats.committed + worker.stats.duplicates >= 2

        await eventually(settled, timeout=30, what="both copies to settle")
    finally:
        worker.stop()
        await running
    assert worker.stats.committed == 1
    assert worker.stats.duplicates == 1
    assert await client.xlen(stream) == 0
    assert (await client.xpending(stream, "lab"))["pending"] == 0
    assert_committed_once(await committed_events(client, prefix, "lab", 2), [task.task_id])


@pytest.mark.parametrize("heartbeat", [True, False], ids=["heartbeat", "no-heartbeat-control"])
async def test_long_task_on_live_worker_is_not_reclaimed(
    client: Redis,
    orch: Orchestrator,
    procs: Procs,
    prefix: str,
    heartbeat: bool,
    tmp_path: object,
    config_path: object,
) -> None:
    """3x the visibility timeout: the heartbeat keeps it; without it, a peer steals it.
    In the control the worker running it neither beats nor reclaims (its own reclaim pass
    would also keep its entry: XAUTOCLAIM resets the idle time of what it takes), the peer
    starts once the run has, and the run lasts until the peer has taken it (60 s, the
    peer's cut to 0.1 s): however slowly the peer starts, the entry is still there to steal
    (with a 3 s run, a peer that took longer than that to start found nothing to reclaim)."""
    if heartbeat:
        procs.worker("tests.agents:LabAgent")
        procs.worker("tests.agents:LabAgent")
        await registered(client, prefix, "lab", 2)
    else:
        from pathlib import Path

        silent = Path(str(tmp_path)) / "silent.yaml"
        extra = "grace_period_s: 5\n  heartbeat_ms: 60000\n  reclaim_interval_ms: 600000"
        silent.write_text(Path(str(config_path)).read_text().replace("grace_period_s: 5", extra))
        procs.worker("tests.agents:LabAgent", env={"DEEPAGENTS_CONFIG": str(silent)})
    handle = await orch.submit(Task(intent="lab", payload={"sleep": 3.0 if heartbeat else 60.0}))
    if not heartbeat:

        async def started() -> bool:
            return len(await runs(client, prefix)) >= 1

        await eventually(started, timeout=30, what="the first run")
        # the peer, with the ordinary config
        procs.worker("tests.agents:LabAgent", env={"LAB_SLEEP_CAP": "0.1"})
    result = await handle.result(timeout=60)
    executions = [t for t, _ in await runs(client, prefix)]
    committed = await committed_events(client, prefix, "lab", 2)
    assert_committed_once(committed, [handle.task_id])
    if heartbeat:
        assert result.status is ResultStatus.SUCCESS
        assert executions == [handle.task_id], "ran once"
        assert result.metrics.attempts == 1
    else:
        # Reclaimed about every visibility timeout: it runs again and again, and may even
        # exhaust max_deliveries and be dead-lettered; either way, never committed twice.
        assert len(executions) >= 2, "without the heartbeat the peer reclaims and runs it again"


async def test_paused_worker_cannot_ack_or_overwrite_after_reclaim(
    client: Redis, orch: Orchestrator, procs: Procs, prefix: str, tmp_path: Path
) -> None:
    """SIGSTOP past the visibility timeout; a peer reclaims; SIGCONT: the paused worker's run
    ends and its late commit is refused, and it does not ack the peer's entry — killing the
    peer mid-task leaves the entry pending, and a third worker finishes it."""
    # The paused worker beats rarely: on waking, its heartbeat would otherwise learn of the
    # reclaim first and cancel the run, and the commit fence would never be reached. It
    # reclaims rarely too: on a starved machine the peer's heartbeat can be late, and the
    # woken worker's reclaim pass would take the entry back (as the protocol allows).
    rare_beat = tmp_path / "rare-heartbeat.yaml"
    lab = 'lab: {class: "tests.agents:LabAgent"'
    rare = ", settings: {heartbeat_ms: 600000, reclaim_interval_ms: 600000}"
    rare_beat.write_text(E2E_CONFIG.replace(lab, lab + rare))
    # Its run ends 3 s in (LAB_SLEEP_CAP), the peer's would take 60: the peer is still
    # running when the woken worker's commit is refused, and when the peer is killed.
    env = {"DEEPAGENTS_CONFIG": str(rare_beat), "LAB_SLEEP_CAP": "3"}
    paused = procs.worker("tests.agents:LabAgent", "--consumer", "paused", env=env)
    # Not awaited as registered: a worker registers with its heartbeat. The first run is.
    handle = await orch.submit(Task(intent="lab", payload={"sleep": 60.0}))

    async def run_count(n: int) -> bool:
        return len(await runs(client, prefix)) >= n

    await eventually(lambda: run_count(1), timeout=30, what="the first run")
    paused.send_signal(signal.SIGSTOP)
    peer = procs.worker("tests.agents:LabAgent", "--consumer", "peer")
    await eventually(lambda: run_count(2), timeout=30, what="the peer to reclaim and start")
    assert (await runs(client, prefix))[1][1] == peer.pid
    paused.send_signal(signal.SIGCONT)  # its run ends now (or soon) and it commits

    stream = f"{prefix}:{{lab:{handle.shard}}}:{handle.tier}"

    async def owned_by_peer() -> bool:
        entries = await client.xpending_range(stream, "lab", min="-", max="+", count=10)
        return len(entries) == 1 and entries[0]["consumer"] == b"peer"

    async def refused() -> bool:
        return f"commit of task {handle.task_id} refused" in procs.output(paused)

    await eventually(refused, timeout=15, what="the paused worker's stale commit refused")
    state = await client.hget(f"{prefix}:{{lab:{handle.shard}}}:t:{handle.task_id}", "state")
    assert state == b"running", "the woken worker must not have committed its stale result"
    assert await owned_by_peer(), "the woken worker must not have acked the peer's entry"
    paused.terminate()  # it beats too rarely to hold a delivery of its own from now on
    assert paused.wait(30) == 0, procs.output(paused)
    os.kill(peer.pid, signal.SIGKILL)
    peer.wait(10)
    assert await owned_by_peer(), "killing the peer leaves its entry pending"
    finisher = procs.worker("tests.agents:LabAgent", "--consumer", "finisher",
                            env={"LAB_SLEEP_CAP": "0.1"})  # fmt: skip
    result = await handle.result(timeout=60)
    assert result.status is ResultStatus.SUCCESS
    # The third delivery's result, not the paused worker's first one.
    assert result.output["pid"] == finisher.pid and result.metrics.attempts == 3
    committed = await committed_events(client, prefix, "lab", 2)
    assert_committed_once(committed, [handle.task_id])
    assert committed[handle.task_id][0]["consumer"] != "peer"
