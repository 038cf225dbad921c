"""Redis killed with ``kill -9`` under load and restarted from its append-only file
(RELIABILITY.md rows 13 and 15): every task whose submit was acknowledged completes, none
is committed twice, and the worker, blocked in its reads when Redis died, carries on."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import FileConfig, Settings
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from deepagents.transport.redis_streams import connect
from tests.e2e.conftest import committed_events, runs, worker_procs
from tests.support.wait import eventually

pytestmark = pytest.mark.slow

TASKS = 2_000


async def test_redis_kill_9_and_restart_lose_nothing_and_commit_once(
    durable: EmbeddedRedis, prefix: str, config: FileConfig, config_path: Path
) -> None:
    client = connect(durable.url)
    procs = worker_procs(durable.url, prefix, config_path)
    settings = Settings(redis_url=durable.url, prefix=prefix, outbox=True)
    try:
        worker = procs.worker("tests.agents:LabAgent")
        async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
            handles = []
            for _ in range(0, TASKS, 500):
                batch = [Task(intent="lab", payload={"sleep": 0.05}) for _i in range(500)]
                handles += await orch.submit_many(batch)

            async def under_way() -> bool:
                return await client.llen(f"{prefix}:runs") >= TASKS // 5

            await eventually(under_way, timeout=60, what="the worker to be mid-run")
            assert durable.process is not None
            durable.process.kill()
            durable.process.wait(10)
            durable.start()  # the same port and directory: it loads its append-only file
            try:
                results = await asyncio.gather(*(h.result(timeout=120) for h in handles))
            except Exception as exc:
                raise AssertionError(f"the worker said:\n{procs.output(worker)}") from exc

        assert all(r.status is ResultStatus.SUCCESS for r in results)
        committed = await committed_events(client, prefix, "lab", 2)
        assert sorted(committed) == sorted(h.task_id for h in handles)
        doubled = [t for t, events in committed.items() if len(events) != 1]
        assert not doubled, f"committed more than once: {doubled[:3]}"
        assert len({t for t, _ in await runs(client, prefix)}) == TASKS
    finally:
        procs.close()
        await client.aclose()
