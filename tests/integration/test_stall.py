"""Redis stalls while callers time out and resend (RELIABILITY row 17): each idempotency key
still has at most one stream entry, and every resend answers with the same task.

The stall is ``CLIENT PAUSE WRITE`` on a Redis of this test alone: commands that write
wait in the server until ``CLIENT UNPAUSE``, as under a long fsync or a blocking script.
Each resend is cut off by the caller's own timeout while its commands may already sit in
the server, the ambiguous case: the caller cannot know whether its submit landed."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import FileConfig, Settings, load_config
from deepagents.orchestrator import Orchestrator
from deepagents.transport.redis_streams import connect
from tests.support.replies import entries
from tests.support.wait import eventually

REPO = Path(__file__).resolve().parents[2]
KEYS = [f"order-{i}" for i in range(5)]
RESENDS = 4


@pytest.fixture
async def own_redis() -> AsyncIterator[Redis]:
    with EmbeddedRedis() as server:
        client = connect(server.url)
        try:
            yield client
        finally:
            await client.aclose()


def _task(key: str) -> dict[str, object]:
    # Built afresh for every send, as a caller resending a request does: a new task id each
    # time, the same key and content.
    return {"intent": "echo", "payload": {"order": key}, "idempotency_key": key}


async def _entries_per_key(client: Redis, prefix: str) -> Counter[str]:
    found: Counter[str] = Counter()
    async for stream in client.scan_iter(match=f"{prefix}:{{echo:*}}:p*", _type="stream"):
        for _, fields in await entries(client, stream):
            found[orjson.loads(fields[b"task"])["idempotency_key"]] += 1
    return found


async def _nothing_waiting(client: Redis) -> bool:
    """No client of the server is held by the pause any more (their commands ran or went)."""
    info = await client.info("clients")
    return int(info.get("blocked_clients", 0)) == 0


async def test_resends_during_a_stall_enqueue_each_key_once(
    own_redis: Redis, settings: Settings
) -> None:
    config: FileConfig = load_config(REPO / "config" / "deepagents.yaml")
    admin = own_redis
    timed_out = 0
    async with Orchestrator.from_client(admin, config=config, settings=settings) as orch:
        await admin.client_pause(60_000, all=False)  # writes only
        try:
            for _ in range(RESENDS):
                for key in KEYS:
                    try:
                        await asyncio.wait_for(orch.submit(_task(key)), 0.2)
                    except TimeoutError:
                        timed_out += 1
        finally:
            await admin.client_unpause()
        await eventually(lambda: _nothing_waiting(admin), what="paused commands to drain")
        handles = [await orch.submit(_task(key)) for key in KEYS]  # resend once more
        again = [await orch.submit(_task(key)) for key in KEYS]

    assert timed_out == RESENDS * len(KEYS)  # every send during the stall was cut off
    assert await _entries_per_key(admin, settings.prefix) == Counter(KEYS)
    assert [h.task_id for h in handles] == [h.task_id for h in again]
    assert all(h.duplicate for h in again)
