"""The runtime on a two-node Redis Cluster: what one node cannot show. Commit batches
split by node, results published on one node and read on the other, every primary checked
at start, and a slot resharded under a running worker (MOVED)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
import redis
from redis.asyncio import Redis
from redis.crc import key_slot

from agents.echo import EchoAgent
from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import FileConfig, Settings, parse_config
from deepagents.contract import ResultStatus, Task
from deepagents.errors import RedisNotSafe
from deepagents.orchestrator import Orchestrator
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams import connect
from deepagents.worker import Worker
from tests.support.cluster import move_slot, owner, running_cluster
from tests.support.workers import running_worker

SHARDS = 4
CONFIG = f"""
defaults: {{shards: {SHARDS}, block_ms: 200, visibility_timeout_ms: 5000}}
agents: {{echo: {{class: "agents.echo:EchoAgent"}}}}
"""


@pytest.fixture(scope="module")
def nodes() -> Iterator[list[EmbeddedRedis]]:
    with running_cluster(2) as servers:
        yield servers


@pytest.fixture
async def client(nodes: list[EmbeddedRedis]) -> AsyncIterator[Redis]:
    runtime = connect(nodes[0].url, cluster=True)
    try:
        yield runtime
    finally:
        await runtime.aclose()


@pytest.fixture
def config() -> FileConfig:
    return parse_config(CONFIG)


@pytest.fixture
def settings(nodes: list[EmbeddedRedis], prefix: str) -> Settings:
    return Settings(redis_url=nodes[0].url, redis_cluster=True, prefix=prefix, outbox=True)


@pytest.fixture
async def worker(
    nodes: list[EmbeddedRedis], config: FileConfig, settings: Settings
) -> AsyncIterator[Worker]:
    # A client of its own, as in a worker process: the submitter's client following a
    # MOVED must not be what updates the worker's map of the cluster.
    own = connect(nodes[0].url, cluster=True)
    try:
        async with running_worker(own, settings, config) as running:
            yield running
    finally:
        await own.aclose()


def _slot(shard: int) -> int:
    return key_slot(Keys("x").shard("echo", shard).stream("p2").encode())


async def _round(orch: Orchestrator, n: int) -> set[int]:
    handles = await orch.submit_many([Task(intent="echo", payload={"i": i}) for i in range(n)])
    results = await asyncio.gather(*(h.result(timeout=30) for h in handles))
    assert all(r.status is ResultStatus.SUCCESS for r in results)
    assert [r.output for r in results] == [{"i": i} for i in range(n)]
    return {h.shard for h in handles}


async def test_shards_on_both_nodes(
    worker: Worker, client: Redis, config: FileConfig, settings: Settings,
    nodes: list[EmbeddedRedis],
) -> None:  # fmt: skip
    homes = {owner(_slot(shard), nodes).port for shard in range(SHARDS)}
    assert homes == {n.port for n in nodes}, "the shards must spread over both nodes"
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        assert await _round(orch, 400) == set(range(SHARDS))
    assert worker.stats.committed == 400 and worker.stats.duplicates == 0


async def test_a_slot_resharded_under_a_running_worker(
    worker: Worker, client: Redis, config: FileConfig, settings: Settings,
    nodes: list[EmbeddedRedis],
) -> None:  # fmt: skip
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        await _round(orch, 100)
        # Shard 0's slot, with its stream, group and task hashes, moves to the other node;
        # the worker's reader, blocked there, is answered MOVED and must follow it.
        source = owner(_slot(0), nodes)
        target = next(n for n in nodes if n is not source)
        move_slot(_slot(0), source, target)
        assert owner(_slot(0), nodes) is target
        assert await _round(orch, 200) == set(range(SHARDS))
    assert worker.stats.committed == 300 and worker.stats.duplicates == 0


async def test_a_primary_that_evicts_is_refused(
    client: Redis, config: FileConfig, settings: Settings, nodes: list[EmbeddedRedis]
) -> None:
    # Only the second node evicts: checking the first (the one named in the URL) alone
    # would let the worker start.
    with redis.Redis(port=nodes[1].port) as second:
        second.config_set("maxmemory-policy", "volatile-lru")
        try:
            worker = Worker.from_client(
                EchoAgent(), client=client, config=config, settings=settings
            )
            with pytest.raises(RedisNotSafe, match=f"'volatile-lru' on 127.0.0.1:{nodes[1].port}"):
                await asyncio.wait_for(worker.run(), 30)
        finally:
            second.config_set("maxmemory-policy", "noeviction")
