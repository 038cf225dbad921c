"""A submit acknowledged to its caller survives a Redis ``kill -9`` (append-only file,
``appendfsync always``): every acknowledged task has its stream entry, its task hash and
its location record once Redis is restarted on the same directory.

``test_a_submit_is_in_redis_when_its_enqueue_returns`` kills Redis at the moment of the
acknowledgement (nothing of a submit may be left to a later turn of the loop);
``test_acknowledged_submits_survive_redis_kill_9`` kills it under a load of concurrent
submits, some of them on the wire."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from redis.asyncio import Redis

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import FileConfig, Settings
from deepagents.errors import TransportError
from deepagents.orchestrator import Orchestrator, TaskHandle
from deepagents.store.tasks import decode_location
from deepagents.transport.base import Admitted
from deepagents.transport.redis_streams import connect
from tests.support.wait import eventually

pytestmark = pytest.mark.slow

PRODUCERS = 16  # concurrent submits: coalesced into shared script calls
ACKED_BEFORE_KILL = 1_000


@pytest.mark.parametrize("kill_at", [1, 2], ids=["a-lone-submit", "a-coalesced-batch"])
async def test_a_submit_is_in_redis_when_its_enqueue_returns(
    durable: EmbeddedRedis,
    prefix: str,
    config: FileConfig,
    monkeypatch: pytest.MonkeyPatch,
    kill_at: int,
) -> None:
    """Redis is killed (SIGKILL) the moment the ``kill_at``-th enqueue round trip returns,
    inside the awaited transport call, before the submit it answers resumes: with 16
    concurrent submits, the first goes alone and the other 15 share the second. Every
    submit acknowledged after that (each task of the batch that returned) is intact once
    Redis is restarted, and the others were refused.

    What this proves: when the enqueue script's reply reaches the submit, the entry, the
    task hash and the location record are in the server's append-only file already; a
    write the submit left to a later turn of the loop would meet a dead server. What it
    cannot prove: that they reached the disk. A killed process's writes stay in the
    kernel's page cache, so ``appendfsync no`` passes this test as well as ``always``;
    surviving a power loss rests on ``appendfsync always`` (Redis syncs the file before it
    replies), which the server here is configured with, not observed doing."""
    client = connect(durable.url)
    settings = Settings(redis_url=durable.url, prefix=prefix, outbox=True)
    batches: list[int] = []  # tasks per enqueue round trip that returned
    try:
        async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
            enqueue_many = orch.bus.enqueue_many

            async def enqueue_then_kill(*args: Any, **kwargs: Any) -> list[Admitted]:
                replies = await enqueue_many(*args, **kwargs)
                batches.append(len(replies))
                if len(batches) == kill_at:
                    assert durable.process is not None
                    durable.process.kill()  # no await since the reply: the caller is not back
                    durable.process.wait(10)
                return replies

            monkeypatch.setattr(orch.bus, "enqueue_many", enqueue_then_kill)
            outcomes = await asyncio.gather(
                *(orch.submit({"intent": "echo", "payload": {"i": i}}) for i in range(PRODUCERS)),
                return_exceptions=True,
            )
            acked = [h for h in outcomes if isinstance(h, TaskHandle)]
            refused = [e for e in outcomes if not isinstance(e, TaskHandle)]
            assert all(isinstance(e, TransportError) for e in refused), refused
            assert len(acked) == sum(batches) and batches[-1] == (1 if kill_at == 1 else 15)
            durable.start()  # the same port and directory: it loads its append-only file
            missing = [h.task_id for h in acked if not await _intact(client, orch, h)]
        assert not missing, f"{len(missing)} of {len(acked)} acknowledged tasks lost: {missing}"
    finally:
        await client.aclose()


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
