"""Text PostgreSQL rejects (NUL, lone surrogates), unreadable entries and rows refused as
data never block the outbox (RELIABILITY row 33)."""

from __future__ import annotations

import asyncpg
import orjson
from redis.asyncio import Redis

from deepagents.config import FileConfig, Settings
from deepagents.contract.events import audit_event
from deepagents.store.audit.decode import BatchDecoder
from deepagents.store.audit.events import COLUMNS
from deepagents.store.audit.migrate import migrate
from deepagents.store.audit.redact import Redactor
from deepagents.store.audit.sink import PgSink
from deepagents.transport.keys import Keys
from tests.audit.support import drained, running_writer


async def test_bad_text_and_unreadable_entries_are_stored_and_acked(
    client: Redis, prefix: str, audit_settings: Settings, config: FileConfig,
    db: asyncpg.Connection,
) -> None:  # fmt: skip
    keys = Keys(prefix)
    await client.sadd(keys.agents_index, "echo")
    stream = keys.shard("echo", 1).outbox
    nul = audit_event("succeeded", "t-nul", agent="echo", result={"output": {"text": "a\x00b"}})
    await client.xadd(stream, {"events": orjson.dumps([nul])})
    surrogate = b'[{"event_id": "%s", "type": "failed", "task_id": "t-sur", "error": "x\\ud800y"}]'
    await client.xadd(
        stream, {"events": surrogate % audit_event("failed", "t")["event_id"].encode()}
    )
    await client.xadd(stream, {"events": b"\xff\xfe not json"})
    await client.xadd(stream, {"other": b"field"})

    async with running_writer(client, audit_settings, config) as writer:
        await drained(writer)

    rows = {r["type"]: r for r in await db.fetch("SELECT * FROM audit_log")}
    assert await db.fetchval("SELECT count(*) FROM audit_log") == 4
    assert orjson.loads(rows["succeeded"]["output"])["output"]["text"] == "a\ufffdb"
    assert rows["failed"]["error"] == "x\ufffdy"
    assert await db.fetchval("SELECT count(*) FROM audit_log WHERE type = 'unreadable'") == 2
    assert await client.xlen(stream) == 0


async def test_a_row_refused_as_data_is_stored_stripped_not_retried(
    pg_url: str, schema: str, db: asyncpg.Connection
) -> None:
    await migrate(pg_url, schema)
    decoder = BatchDecoder(Redactor())
    good, bad = decoder.rows([("s", "1-0", {b"events": orjson.dumps(
        [audit_event("submitted", "ok"), audit_event("submitted", "bad")])})])  # fmt: skip
    broken = list(bad)
    broken[COLUMNS.index("payload")] = "{not json"  # what PostgreSQL would refuse
    sink = PgSink(pg_url, schema)
    try:
        assert await decoder.store(sink, [good, tuple(broken)]) == 2
    finally:
        await sink.close()
    row = await db.fetchrow(
        "SELECT task_id, detail FROM audit_log WHERE type = 'submitted' AND task_id IS NULL"
    )
    assert row is not None
    assert "unstorable" in orjson.loads(row["detail"])
    assert await db.fetchval("SELECT count(*) FROM audit_log") == 2
