"""The audit writer on Redis Cluster (``cluster_url``: a redis-server in cluster mode):
every command it sends stays in one hash slot. Each shard's outbox stream has its own hash
tag, so its own slot."""

from __future__ import annotations

import asyncpg
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from deepagents.config import FileConfig, Settings
from deepagents.store.audit.outbox import GROUP, Outbox
from deepagents.transport.keys import Keys
from tests.audit.support import drained, fill_outbox, running_writer, sequences

SHARDS = 2  # AUDIT_CONFIG's shard count


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
