"""Poison and undecodable messages, unsafe Redis, blocking agents, replay from the DLQ."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading

import pytest
from redis.asyncio import Redis

from agents.echo import EchoAgent
from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import FileConfig, Settings
from deepagents.contract import ResultStatus, Task
from deepagents.errors import RedisNotSafe
from deepagents.orchestrator import Orchestrator
from deepagents.transport.redis_streams import connect
from deepagents.worker import Worker
from tests.agents import BlockingAgent, LabAgent
from tests.e2e.conftest import committed_events
from tests.support.procs import REPO, Procs
from tests.support.replies import as_bytes
from tests.support.wait import eventually


async def _run_worker(worker: Worker) -> asyncio.Task[None]:
    task = asyncio.create_task(worker.run())
    await asyncio.wait(
        [task, asyncio.create_task(worker.ready.wait())], return_when="FIRST_COMPLETED"
    )
    if task.done():
        task.result()
    return task


async def test_undecodable_and_poison_messages_are_dead_lettered_then_replayed(
    client: Redis,
    config: FileConfig,
    settings: Settings,
    orch: Orchestrator,
    procs: Procs,
    prefix: str,
) -> None:
    worker = Worker.from_client(
        LabAgent(client, prefix), client=client, config=config, settings=settings
    )
    running = await _run_worker(worker)
    try:
        garbage_stream = f"{prefix}:{{lab:0}}:p2"
        await client.xadd(garbage_stream, {"task": b"{not json", "attempt": 1, "enq": 0})
        poison = await orch.submit(Task(intent="lab", payload={"fail_until_fixed": True}))
        result = await poison.result(timeout=30)
        assert result.status is ResultStatus.FAILED
        assert result.error is not None and result.error.code == "dead_lettered"
        assert "max_deliveries" in result.error.message

        async def two_dead() -> bool:
            return sum([await client.xlen(f"{prefix}:{{lab:{s}}}:dlq") for s in (0, 1)]) == 2

        await eventually(two_dead, timeout=30, what="both messages in the dead-letter streams")
    finally:
        worker.stop()
        await running
    listing = procs.run("dlq", "list", "--json")
    assert listing.returncode == 0, listing.stderr
    dead = {d["reason"]: d for d in json.loads(listing.stdout)}
    assert set(dead) == {"decode_error", "max_deliveries"}
    assert "JSONDecodeError" in dead["decode_error"]["error"]
    assert dead["max_deliveries"]["task_id"] == poison.task_id
    assert dead["max_deliveries"]["deliveries"] == 3
    assert int(as_bytes(await client.get(f"{prefix}:exec:{poison.task_id}"))) == 3

    # The fix ships; replay the poison message and it completes.
    await client.set(f"{prefix}:fixed", 1)
    replay = procs.run("dlq", "replay", dead["max_deliveries"]["entry_id"], "--json")
    assert replay.returncode == 0, replay.stderr
    worker = Worker.from_client(
        LabAgent(client, prefix), client=client, config=config, settings=settings
    )
    running = await _run_worker(worker)
    try:

        async def done() -> bool:
            info = await orch.lookup(poison.task_id)
            return info is not None and info["state"] == "done"

        await eventually(done, timeout=30, what="the replayed task to complete")
    finally:
        worker.stop()
        await running
    final = await orch.get_result(poison.task_id)
    assert final is not None and final.status is ResultStatus.SUCCESS
    remaining = json.loads(procs.run("dlq", "list", "--json").stdout)
    assert [d["reason"] for d in remaining] == ["decode_error"]


async def test_replay_of_unknown_id_is_a_clear_error(procs: Procs, client: Redis) -> None:
    out = procs.run("dlq", "replay", "1-0")
    assert out.returncode != 0
    assert out.stderr.strip() == "deepagents: error: no dead letter '1-0'"


async def test_evicting_redis_is_refused_with_a_clear_message(
    config: FileConfig, settings: Settings
) -> None:
    with EmbeddedRedis(extra_args=("--maxmemory-policy", "allkeys-lru")) as server:
        client = connect(server.url)
        try:
            worker = Worker.from_client(
                LabAgent(client, "x"),
                client=client,
                config=config,
                settings=settings.model_copy(update={"redis_url": None}),
            )
            with pytest.raises(RedisNotSafe, match="maxmemory-policy is 'allkeys-lru'"):
                await worker.run()
        finally:
            await client.aclose()
        cli = subprocess.run(
            [sys.executable, "-m", "deepagents", "worker", "agents.echo:EchoAgent"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={"PATH": "/usr/bin:/bin", "DEEPAGENTS_REDIS_URL": server.url},
        )
    assert cli.returncode == 1
    assert "maxmemory-policy is 'allkeys-lru'" in cli.stderr
    assert "Traceback" not in cli.stderr


async def test_blocking_sync_agent_does_not_stall_other_tasks(
    client: Redis, config: FileConfig, settings: Settings, prefix: str
) -> None:
    async with Orchestrator.from_client(
        client, config=config, settings=settings, agents=[BlockingAgent]
    ) as orch:
        release = threading.Event()
        agent = BlockingAgent(release)
        worker = Worker.from_client(agent, client=client, config=config, settings=settings)
        running = await _run_worker(worker)
        try:
            # Blocks its thread until released: the quick tasks must all finish meanwhile,
            # however slow the machine.
            slow = await orch.submit(Task(intent="block", payload={"hold": True}))

            async def slow_started() -> bool:
                return await orch.task_state(slow.task_id) == "running"

            await eventually(slow_started, timeout=30, what="the blocking task to start")
            quick = await orch.submit_many([Task(intent="block", payload={}) for _ in range(30)])
            quick_results = await asyncio.gather(*(h.result(timeout=30) for h in quick))
            assert await orch.task_state(slow.task_id) == "running"
            release.set()
            slow_result = await slow.result(timeout=30)
        finally:
            release.set()
            worker.stop()
            await running
    assert all(r.status is ResultStatus.SUCCESS for r in quick_results)
    assert max(r.output["finished"] for r in quick_results) < slow_result.output["finished"]


async def test_deadlines_expired_in_queue_and_while_running(
    client: Redis, config: FileConfig, settings: Settings, orch: Orchestrator, prefix: str
) -> None:
    from datetime import timedelta

    from deepagents.contract.task import utcnow

    soon = utcnow() + timedelta(milliseconds=300)
    expiring = await orch.submit(Task(intent="lab", payload={}, deadline=soon))
    running_over = await orch.submit(
        # Its result is awaited for 30 s: it can only come from the cut at the deadline.
        Task(intent="lab", payload={"sleep": 120}, deadline=utcnow() + timedelta(seconds=2))
    )

    async def passed() -> bool:
        return utcnow() > soon

    await eventually(passed, timeout=5, what="the first deadline to pass in the queue")
    worker = Worker.from_client(
        LabAgent(client, prefix), client=client, config=config, settings=settings
    )
    running = await _run_worker(worker)
    try:
        first = await expiring.result(timeout=30)
        second = await running_over.result(timeout=30)
    finally:
        worker.stop()
        await running
    assert first.error is not None and first.error.code == "deadline_exceeded"
    assert await client.get(f"{prefix}:exec:{expiring.task_id}") is None, (
        "an expired task never runs"
    )
    assert second.error is not None and second.error.code == "deadline_exceeded"
    print(f"\ndeadline 2 s after submit: cut after a run of {second.metrics.latency_ms:.0f} ms")
    committed = await committed_events(client, prefix, "lab", 2)
    assert committed[expiring.task_id][0]["type"] == "expired"
    assert committed[running_over.task_id][0]["type"] == "failed"


async def test_redis_losing_its_data_mid_run_does_not_stop_the_worker(
    client: Redis,
    config: FileConfig,
    settings: Settings,
    orch: Orchestrator,
    prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """RELIABILITY.md row 23: streams and groups vanish (FLUSHALL, a restart without
    persistence). Readers answered NOGROUP re-create their group; new work flows again."""
    worker = Worker.from_client(EchoAgent(), client=client, config=config, settings=settings)
    running = await _run_worker(worker)
    try:
        first = await orch.submit_many([Task(intent="echo", payload={"i": i}) for i in range(20)])
        await asyncio.gather(*(h.result(timeout=30) for h in first))
        # This test's whole keyspace goes, as FLUSHALL would take it (other tests' keys stay).
        for key in [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]:
            await client.delete(key)
        then = await orch.submit_many([Task(intent="echo", payload={"i": i}) for i in range(20)])
        results = await asyncio.gather(*(h.result(timeout=30) for h in then))
        assert [r.output for r in results] == [{"i": i} for i in range(20)]
        assert not running.done(), "the worker must keep running"
    finally:
        worker.stop()
        await running
    assert worker.stats.committed == 40
    assert any(r.getMessage().find("re-creating it") > 0 for r in caplog.records)


async def test_a_task_that_kills_its_worker_is_dead_lettered_after_max_deliveries(
    client: Redis, orch: Orchestrator, procs: Procs, prefix: str
) -> None:
    """RELIABILITY.md row 9: a poison task that ends the process, under a supervisor that
    restarts it. Each crash counts as a delivery; at max_deliveries (3 here) the task is
    dead-lettered without running, and the worker lives on."""
    poison = await orch.submit(Task(intent="lab", payload={"crash": True}))
    others = await orch.submit_many([Task(intent="lab", payload={"n": i}) for i in range(20)])
    dlq = [f"{prefix}:{{lab:{s}}}:dlq" for s in (0, 1)]

    async def dead_lettered() -> bool:
        return sum([await client.xlen(key) for key in dlq]) > 0

    deaths = 0
    for _ in range(6):  # the supervisor: restart under the same name after each crash
        worker = procs.worker("tests.agents:LabAgent", env={"DEEPAGENTS_CONSUMER": "w1"})

        async def settled(proc: subprocess.Popen[bytes] = worker) -> bool:
            return proc.poll() is not None or await dead_lettered()

        await eventually(settled, timeout=60, what="a crash or the dead letter")
        if worker.poll() is None:
            break
        assert worker.returncode == 137, procs.output(worker)
        deaths += 1

    assert deaths == 3, f"the worker died {deaths} times: {procs.output(worker)}"
    result = await poison.result(timeout=30)
    assert result.error is not None and result.error.code == "dead_lettered"
    assert "max_deliveries" in result.error.message
    assert int(as_bytes(await client.get(f"{prefix}:exec:{poison.task_id}"))) == 3
    done = await asyncio.gather(*(h.result(timeout=60) for h in others))
    assert all(r.status is ResultStatus.SUCCESS for r in done), [
        (r.metrics.attempts, r.error) for r in done if r.status is not ResultStatus.SUCCESS
    ]
    assert worker.poll() is None, "the last worker keeps serving"
