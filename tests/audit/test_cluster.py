"""The audit writer on Redis Cluster: every command it sends stays in one hash slot.

A private redis-server runs in cluster mode and owns all 16,384 slots. One node is enough:
a cluster node refuses a command whose keys span slots (CROSSSLOT) whatever the number of
nodes, and each shard's outbox stream has its own hash tag, so its own slot.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest
import redis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import FileConfig, Settings
from deepagents.store.audit.outbox import GROUP, Outbox
from deepagents.transport.keys import Keys
from tests.audit.support import drained, duplicates, fill_outbox, running_writer, sequences

SHARDS = 2  # AUDIT_CONFIG's shard count


@pytest.fixture(scope="module")
def cluster_url() -> Iterator[str]:
    args = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
    with EmbeddedRedis(extra_args=args) as server:
        node = redis.Redis(port=server.port)
        try:
            # ADDSLOTS with every slot, not ADDSLOTSRANGE: Redis 6.2 knows only this one.
            node.execute_command("CLUSTER", "ADDSLOTS", *range(16384))
            deadline = time.monotonic() + 30
            while b"cluster_state:ok" not in node.execute_command("CLUSTER", "INFO"):
                assert time.monotonic() < deadline, "the one-node cluster never became ready"
                time.sleep(0.05)
        finally:
            node.close()
        yield server.url


@pytest.fixture
async def cluster(cluster_url: str, prefix: str) -> AsyncIterator[RedisCluster]:
    client = RedisCluster.from_url(cluster_url)
    try:
        yield client
    finally:
        await client.aclose()


def _outboxes(prefix: str) -> list[str]:
    return [Keys(prefix).shard("echo", shard).outbox for shard in range(SHARDS)]


async def test_writer_drains_every_shard_through_a_cluster_client(
    cluster: RedisCluster,
    prefix: str,
    audit_settings: Settings,
    config: FileConfig,
    db: asyncpg.Connection,
) -> None:
    streams = _outboxes(prefix)
    assert len({key_slot(s.encode()) for s in streams}) == SHARDS, "shards share a slot"
    expected = await fill_outbox(cluster, prefix, "echo", SHARDS, 300, fail_every=7)
    assert all([await cluster.xlen(s) for s in streams]), "every shard has entries"

    async with running_writer(cluster, audit_settings, config) as writer:
        await drained(writer)
    assert writer.stats.redis_failures == 0

    assert await sequences(db) == expected
    assert await duplicates(db) == 0
    # Acked and deleted together, per stream: nothing left behind, nothing pending.
    for stream in streams:
        assert await cluster.xlen(stream) == 0
        assert (await cluster.xpending(stream, GROUP))["pending"] == 0


async def test_entries_a_dead_writer_read_are_reclaimed_on_a_cluster(
    cluster: RedisCluster,
    prefix: str,
    audit_settings: Settings,
    config: FileConfig,
    db: asyncpg.Connection,
) -> None:
    expected = await fill_outbox(cluster, prefix, "echo", SHARDS, 40)
    # A writer that read every entry and died before acking: all of it is pending.
    for stream in _outboxes(prefix):
        await cluster.xgroup_create(stream, GROUP, id="0")
        await cluster.xreadgroup(GROUP, "dead-writer", {stream: ">"})
        assert (await cluster.xpending(stream, GROUP))["pending"] > 0

    settings = audit_settings.model_copy(update={"audit_claim_idle_ms": 1})
    async with running_writer(cluster, settings, config) as writer:
        await drained(writer)
    assert writer.stats.reclaimed > 0
    assert await sequences(db) == expected
    assert await duplicates(db) == 0


async def test_ack_deletes_batches_larger_than_one_script_chunk(
    cluster: RedisCluster, prefix: str, config: FileConfig
) -> None:
    # Over 8,000 ids: one unpack() of them all fails ("too many results to unpack");
    # the ack script passes them to XACK and XDEL 1,000 at a time.
    stream = _outboxes(prefix)[0]
    pipe = cluster.pipeline(transaction=False)
    for i in range(10_000):
        pipe.xadd(stream, {"events": b"[]", "i": i})
    await pipe.execute()
    outbox = Outbox(cluster, Keys(prefix), config, "writer-1")
    await outbox.discover(force=True)
    entries = await outbox.read(count=20_000, block_ms=0)
    assert len(entries) == 10_000
    await outbox.ack(entries)
    assert await cluster.xlen(stream) == 0
    assert (await cluster.xpending(stream, GROUP))["pending"] == 0
