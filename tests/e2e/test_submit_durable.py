"""A submit acknowledged to its caller survives a Redis ``kill -9`` (append-only file,
``appendfsync always``): Redis is killed while submits are still under way, restarted on
the same directory, and every acknowledged task has its stream entry, its task hash and
its location record. Nothing of a submit is deferred past its acknowledgement (the
location is written in the enqueue script, coalesced submits share one)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from redis.asyncio import Redis

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import FileConfig, Settings
from deepagents.errors import TransportError
from deepagents.orchestrator import Orchestrator, TaskHandle
from deepagents.store.tasks import decode_location
from deepagents.transport.redis_streams import connect
from tests.support.wait import eventually

pytestmark = pytest.mark.slow

PRODUCERS = 16  # concurrent submits: coalesced into shared script calls
ACKED_BEFORE_KILL = 1_000


async def test_acknowledged_submits_survive_redis_kill_9(
    durable: EmbeddedRedis, prefix: str, config: FileConfig
) -> None:
    client = connect(durable.url)
    settings = Settings(redis_url=durable.url, prefix=prefix, outbox=True)
    acked: list[TaskHandle] = []
    try:
        async with Orchestrator.from_client(client, config=config, settings=settings) as orch:

            async def produce(n: int) -> None:
                with contextlib.suppress(TransportError):  # Redis died under this submit
                    for i in range(10_000):
                        acked.append(await orch.submit({"intent": "echo", "payload": {"i": i}}))

            producers = [asyncio.create_task(produce(n)) for n in range(PRODUCERS)]

            async def enough() -> bool:
                return len(acked) >= ACKED_BEFORE_KILL

            await eventually(enough, timeout=60, what=f"{ACKED_BEFORE_KILL} acknowledged submits")
            assert durable.process is not None
            durable.process.kill()  # submits still on the wire: the rest meet the crash
            known = list(acked)  # acknowledged before the kill could answer anything else
            durable.process.wait(10)
            await asyncio.gather(*producers, return_exceptions=True)
            durable.start()  # the same port and directory: it loads its append-only file
            missing = [h.task_id for h in known if not await _intact(client, orch, h)]
        assert not missing, f"{len(missing)} of {len(known)} acknowledged tasks lost: {missing[:3]}"
    finally:
        await client.aclose()


async def _intact(client: Redis, orch: Orchestrator, handle: TaskHandle) -> bool:
    """Its location record names where it is, its task hash is queued there, and the
    hash's stream entry is in the stream."""
    raw = await client.get(orch.keys.location(handle.task_id))
    if raw is None:
        return False
    location = decode_location(raw)
    if (location.agent, location.shard, location.tier) != (handle.agent, handle.shard, handle.tier):
        return False
    keys = orch.keys.shard(handle.agent, handle.shard)
    fields = await client.hgetall(keys.task(handle.task_id))
    if fields.get(b"state") != b"queued":
        return False
    entry = fields[b"entry"]
    found = await client.xrange(keys.stream(handle.tier), entry, entry)
    return found is not None and len(found) == 1
