"""The disk under Redis's append-only file fills up (RELIABILITY row 27): Redis refuses
writes with ``MISCONF``. Submits fail with an error that says so (the gateway answers 503),
the worker waits it out instead of stopping, and once space is freed every task whose
submit was acknowledged completes, committed once.

Needs root to mount a 16 MB tmpfs as the full disk; skipped where that is not allowed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import FileConfig, Settings
from deepagents.contract import ResultStatus, Task
from deepagents.errors import TransportError
from deepagents.orchestrator import Orchestrator, TaskHandle
from deepagents.transport.redis_streams import connect
from tests.e2e.conftest import assert_committed_once, committed_events, registered, worker_procs
from tests.support.disk import fill, small_disk
from tests.support.wait import eventually

pytestmark = pytest.mark.slow


@pytest.fixture
def disk() -> Iterator[Path]:
    with small_disk(16) as path:
        yield path


async def _misconf_replies(client: Redis) -> int:
    """How many commands Redis refused with MISCONF so far (INFO errorstats, Redis 7)."""
    stats = await client.info("errorstats")
    return int(stats.get("errorstat_MISCONF", {}).get("count", 0))


def _echo() -> Task:
    return Task(intent="echo", payload={"x": 1})


async def test_a_full_disk_under_redis_is_waited_out_and_loses_nothing(
    disk: Path, prefix: str, config: FileConfig, config_path: Path
) -> None:
    server = EmbeddedRedis(extra_args=("--appendonly", "yes"), data_dir=str(disk))
    server.start()
    client = connect(server.url)
    procs = worker_procs(server.url, prefix, config_path)
    settings = Settings(redis_url=server.url, prefix=prefix, outbox=True)
    accepted: list[TaskHandle] = []
    try:
        worker = procs.worker("agents.echo:EchoAgent")
        await registered(client, prefix, "echo", 1)
        async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
            accepted += await orch.submit_many([_echo() for _ in range(100)])
            await asyncio.gather(*(h.result(timeout=60) for h in accepted))
            fill(disk / "fill")

            async def refused() -> bool:
                # Redis finds the disk full at its next write to the file: until then it
                # takes writes (in memory, as with any everysec AOF).
                try:
                    accepted.append(await orch.submit(_echo()))
                except TransportError as exc:
                    assert "disk full" in str(exc) and exc.retryable, exc
                    return True
                return False

            await eventually(refused, what="Redis to refuse writes")
            seen = await _misconf_replies(client)

            async def worker_refused() -> bool:  # its reads are writes too (the PEL)
                return await _misconf_replies(client) >= seen + 3

            await eventually(worker_refused, what="the worker's reads to be refused")
            assert worker.poll() is None, procs.output(worker)

            (disk / "fill").unlink()

            async def taking() -> bool:
                try:
                    accepted.append(await orch.submit(_echo()))
                except TransportError:
                    return False
                return True

            await eventually(taking, what="Redis to take writes again")
            accepted += await orch.submit_many([_echo() for _ in range(100)])
            results = await asyncio.gather(*(h.result(timeout=60) for h in accepted))
        assert all(r.status is ResultStatus.SUCCESS for r in results)
        assert worker.poll() is None, procs.output(worker)
        committed = await committed_events(client, prefix, "echo", 2)
        assert_committed_once(committed, [h.task_id for h in accepted])
    finally:
        procs.close()
        await client.aclose()
        server.stop()
