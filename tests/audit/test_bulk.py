"""10,000 tasks through the outbox: every event stored exactly once, in order, even with
producer-side duplicates and a stream the agent registry does not know about."""

from __future__ import annotations

import random

import asyncpg
import orjson
from redis.asyncio import Redis

from deepagents.config import FileConfig, Settings
from deepagents.transport.keys import Keys
from tests.audit.support import drained, fill_outbox, running_writer, sequences
from tests.support.replies import entries
from tests.support.wait import eventually


async def test_ten_thousand_tasks_each_sequence_exactly_once_in_order(
    client: Redis, prefix: str, audit_settings: Settings, config: FileConfig,
    db: asyncpg.Connection,
) -> None:  # fmt: skip
    keys = Keys(prefix)
    await client.sadd(keys.agents_index, "echo")
    expected = await fill_outbox(client, prefix, "echo", 2, 9_000, fail_every=10)
    # An agent no worker registered (only SCAN finds its stream), with a different shard count.
    expected |= await fill_outbox(client, prefix, "ghost", 3, 1_000)
    # Producer retries: the same entries appended twice must not double any row.
    stream = keys.shard("echo", 0).outbox
    for _, fields in random.sample(await entries(client, stream, count=2_000), 300):
        await client.xadd(stream, dict(fields.items()))
    total_events = sum(len(v) for v in expected.values())

    async with running_writer(client, audit_settings, config, scan_s=0.5) as writer:
        await drained(writer, timeout=120)
        stats = writer.stats

    assert len(expected) == 10_000
    assert await db.fetchval("SELECT count(*) FROM audit_log") == total_events
    assert await sequences(db) == expected
    assert stats.duplicates >= 300  # the re-appended entries were seen and skipped
    assert await client.xlen(stream) == 0  # acked entries are deleted


async def test_rows_carry_trace_metrics_and_hash(
    client: Redis, prefix: str, audit_settings: Settings, config: FileConfig,
    db: asyncpg.Connection,
) -> None:  # fmt: skip
    await client.sadd(Keys(prefix).agents_index, "echo")
    expected = await fill_outbox(client, prefix, "echo", 2, 5)
    async with running_writer(client, audit_settings, config) as writer:
        await drained(writer)
    task_id = next(iter(expected))
    rows = await db.fetch("SELECT * FROM audit_log WHERE task_id = $1 ORDER BY ts", task_id)
    submitted, started, succeeded = rows
    assert len(submitted["trace_id"]) == 32 and len(submitted["span_id"]) == 16
    assert submitted["trace_id"] == succeeded["trace_id"]
    assert submitted["input_hash"].startswith("sha256:")
    assert orjson.loads(submitted["payload"])["customer"] == {"id": 42, "country": "FR"}
    assert succeeded["status"] == "success" and succeeded["tokens_used"] == 120
    assert succeeded["cost_usd"] == 0.0012 and succeeded["latency_ms"] == 3.2
    assert started["queue_ms"] == 1.0 and succeeded["agent_version"] == "1.0.0"
    assert (
        await db.fetchval(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'audit_log'::regclass"
        )
    ) >= 8


async def test_writer_waits_for_streams_that_appear_later(
    client: Redis, prefix: str, audit_settings: Settings, config: FileConfig,
    db: asyncpg.Connection,
) -> None:  # fmt: skip
    async with running_writer(client, audit_settings, config) as writer:
        assert writer.outbox.streams == set()
        assert (await writer.backlog()).total == 0
        await client.sadd(Keys(prefix).agents_index, "echo")  # a worker registers later
        expected = await fill_outbox(client, prefix, "echo", 2, 50)

        async def found() -> bool:  # by the writer's own discovery, not the test's
            return len(writer.outbox.streams) == 2

        await eventually(found, timeout=10, what="writer discovered the new streams")
        await drained(writer)
    assert await sequences(db) == expected
