"""Worker lifecycle: graceful shutdown on SIGTERM, and a restart under the same consumer name."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from tests.e2e.conftest import committed_events, runs
from tests.support.procs import Procs
from tests.support.replies import entries
from tests.support.wait import eventually

pytestmark = pytest.mark.slow


async def _registered(client: Redis, prefix: str, consumer: str) -> None:
    async def seen() -> bool:
        return await client.hexists(f"{prefix}:agent:lab:instances", consumer)

    await eventually(seen, timeout=30, what=f"worker {consumer} registered")


async def test_sigterm_finishes_in_flight_work_and_exits_cleanly(
    client: Redis, orch: Orchestrator, procs: Procs, prefix: str
) -> None:
    worker = procs.worker("tests.agents:LabAgent", "--consumer", "w1")
    await _registered(client, prefix, "w1")
    handles = await orch.submit_many(
        [Task(intent="lab", payload={"sleep": 1.0}) for _ in range(10)]
    )

    async def all_started() -> bool:
        return len(await runs(client, prefix)) == 10

    await eventually(all_started, timeout=30, what="ten tasks running")
    worker.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(worker.wait, 30) == 0
    results = await asyncio.gather(*(h.result(timeout=5) for h in handles))
    assert all(r.status is ResultStatus.SUCCESS for r in results), "in-flight work was finished"
    assert not await client.hexists(f"{prefix}:agent:lab:instances", "w1"), "deregistered"
    committed = await committed_events(client, prefix, "lab", 2)
    assert sorted(committed) == sorted(h.task_id for h in handles)


async def test_restart_under_the_same_name_resumes_its_pending_at_once(
    client: Redis, procs: Procs, prefix: str, config_path: Path, settings: object
) -> None:
    # A visibility timeout far longer than the test: only the history read can recover.
    config_path.write_text(
        config_path.read_text().replace(
            "visibility_timeout_ms: 1000", "visibility_timeout_ms: 600000"
        )
    )
    from deepagents.config import load_config

    config = load_config(config_path)
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:  # type: ignore[arg-type]
        first = procs.worker("tests.agents:LabAgent", "--consumer", "same")
        await _registered(client, prefix, "same")
        handles = await orch.submit_many(
            [Task(intent="lab", payload={"sleep": 30}) for _ in range(5)]
        )

        async def started() -> bool:
            return len(await runs(client, prefix)) == 5

        await eventually(started, timeout=30, what="five tasks running")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        # Same consumer name: it re-reads its own pending entries before new ones.
        restart_at = time.monotonic()
        procs.worker("tests.agents:LabAgent", "--consumer", "same", env={"LAB_SLEEP_CAP": "0.1"})
        results = await asyncio.gather(*(h.result(timeout=60) for h in handles))
    assert all(r.status is ResultStatus.SUCCESS for r in results)
    assert time.monotonic() - restart_at < 30, "recovered long before the visibility timeout"
    assert all(r.metrics.attempts == 2 for r in results)


async def test_a_running_task_has_its_started_event_before_it_finishes(
    client: Redis, orch: Orchestrator, procs: Procs, prefix: str
) -> None:
    """The start of a long task is in the audit outbox while it runs, not only at its end."""
    procs.worker("tests.agents:LabAgent", "--consumer", "w1")
    handle = await orch.submit(Task(intent="lab", payload={"sleep": 3.0}))

    async def started() -> list[dict[str, Any]]:
        events = []
        for shard in range(2):
            for _, fields in await entries(client, f"{prefix}:{{lab:{shard}}}:audit"):
                events += [e for e in orjson.loads(fields[b"events"]) if e["type"] == "started"]
        return [e for e in events if e["task_id"] == handle.task_id]

    (event,) = await eventually(started, timeout=30, what="the started event")
    assert (event["deliveries"], event["consumer"], event["attempt"]) == (1, "w1", 1)
    assert await handle.state() == "running"
    assert handle.task_id not in await committed_events(client, prefix, "lab", 2)
    assert (await handle.result(timeout=30)).status is ResultStatus.SUCCESS
    assert len(await started()) == 1


async def test_a_task_handed_back_at_shutdown_is_not_counted_as_a_delivery(
    client: Redis, orch: Orchestrator, procs: Procs, prefix: str
) -> None:
    """Longer than the grace period: handed back at SIGTERM and finished by the next worker.
    A deploy is not a failed delivery: it must not bring the task closer to max_deliveries."""
    first = procs.worker("tests.agents:LabAgent", "--consumer", "w1")
    await _registered(client, prefix, "w1")
    handles = await orch.submit_many([Task(intent="lab", payload={"sleep": 60}) for _ in range(3)])

    async def started() -> bool:
        return len(await runs(client, prefix)) == 3

    await eventually(started, timeout=30, what="three tasks running")
    first.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(first.wait, 30) == 0, procs.output(first)
    procs.worker("tests.agents:LabAgent", "--consumer", "w2", env={"LAB_SLEEP_CAP": "0.1"})
    results = await asyncio.gather(*(h.result(timeout=60) for h in handles))

    assert all(r.status is ResultStatus.SUCCESS for r in results)
    assert len(await runs(client, prefix)) == 6, "each ran on both workers"
    assert [r.metrics.attempts for r in results] == [1, 1, 1]


async def test_sighup_neither_stops_a_worker_nor_interrupts_its_tasks(
    client: Redis, orch: Orchestrator, procs: Procs, prefix: str
) -> None:
    worker = procs.worker("tests.agents:LabAgent", "--consumer", "w1")
    await _registered(client, prefix, "w1")
    handles = await orch.submit_many([Task(intent="lab", payload={"sleep": 0.5}) for _ in range(5)])

    async def started() -> bool:
        return len(await runs(client, prefix)) >= 1

    await eventually(started, what="tasks running")
    worker.send_signal(signal.SIGHUP)  # by default, SIGHUP ends a process on the spot
    results = await asyncio.gather(*(h.result(timeout=30) for h in handles))
    assert all(r.status is ResultStatus.SUCCESS for r in results)
    assert all(r.metrics.attempts == 1 for r in results)  # none was interrupted
    assert worker.poll() is None, procs.output(worker)
    assert "SIGHUP received and ignored" in procs.output(worker)
