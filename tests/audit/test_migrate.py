"""Migrations: idempotent, safe from concurrent processes, refuse edited history;
partitions ahead and retention."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from deepagents.store.audit.errors import MigrationError
from deepagents.store.audit.migrate import migrate, migrations, prune

SCHEMA_SHAPE = """
SELECT 'col ' || table_name || '.' || column_name || ' ' || data_type
  FROM information_schema.columns WHERE table_schema = $1 AND table_name NOT LIKE 'audit_log_p%'
UNION ALL
SELECT 'idx ' || indexname || ' ' || regexp_replace(indexdef, ' ON [^ ]+', '')
  FROM pg_indexes WHERE schemaname = $1 AND tablename NOT LIKE 'audit_log_p%'
UNION ALL
SELECT 'fn ' || p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
  WHERE n.nspname = $1
UNION ALL
SELECT 'mig ' || version || ' ' || name FROM deepagents_migrations
ORDER BY 1
"""


async def shape(db: asyncpg.Connection, schema: str) -> list[str]:
    return [r[0] for r in await db.fetch(SCHEMA_SHAPE, schema)]


def migrate_process(pg_url: str, schema: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEEPAGENTS_")}
    env |= {"DEEPAGENTS_DATABASE_URL": pg_url, "DEEPAGENTS_AUDIT_SCHEMA": schema}
    return subprocess.Popen([sys.executable, "-m", "deepagents", "db", "migrate"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip


async def test_migrate_twice_applies_once(pg_url: str, schema: str, db: asyncpg.Connection) -> None:
    names = [f"{m.version:04d}_{m.name}" for m in migrations()]
    assert await migrate(pg_url, schema) == names
    first = await shape(db, schema)
    assert await migrate(pg_url, schema) == []
    assert await shape(db, schema) == first
    assert any(
        line.startswith("idx audit_log_task_idx") and "(task_id, ts)" in line for line in first
    )


async def test_concurrent_migrations_from_two_processes(
    pg_url: str, schema: str, db: asyncpg.Connection
) -> None:
    procs = [migrate_process(pg_url, schema) for _ in range(2)]
    outputs = [await asyncio.to_thread(p.communicate, timeout=60) for p in procs]
    texts = [out.decode() for out, _ in outputs]
    assert [p.returncode for p in procs] == [0, 0], texts
    assert sorted("applied" in t for t in texts) == [False, True], texts  # one did the work
    concurrent = await shape(db, schema)
    # Same schema as a fresh sequential migration into another schema gives.
    other = f"{schema}_ref"
    try:
        await migrate(pg_url, other)
        assert [line.replace(other, schema) for line in await shape(db, other)] == concurrent
    finally:
        await db.execute(f'DROP SCHEMA IF EXISTS "{other}" CASCADE')


async def test_edited_migration_is_refused(
    pg_url: str, schema: str, db: asyncpg.Connection
) -> None:
    await migrate(pg_url, schema)
    await db.execute("UPDATE deepagents_migrations SET checksum = 'x' WHERE version = 1")
    with pytest.raises(MigrationError, match="changed after it was applied"):
        await migrate(pg_url, schema)


async def test_partitions_ahead_and_retention(
    pg_url: str, schema: str, db: asyncpg.Connection
) -> None:
    await migrate(pg_url, schema)
    today = datetime.now(UTC).date()
    parts = {r[0] for r in await db.fetch(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = 'audit_log'::regclass")}  # fmt: skip
    assert f"audit_log_p{today + timedelta(days=7):%Y%m%d}" in parts
    old = today - timedelta(days=40)
    assert await db.fetchval("SELECT audit_ensure_partition($1)", old) is True
    assert await db.fetchval("SELECT audit_ensure_partition($1)", old) is False
    await db.execute(
        "INSERT INTO audit_log (event_id, ts, type) VALUES (gen_random_uuid(), $1, 'submitted')",
        datetime.combine(old, datetime.min.time(), UTC) + timedelta(hours=1),
    )
    dropped = await prune(pg_url, schema, keep_days=30)
    assert dropped == [f"audit_log_p{old:%Y%m%d}"]
    assert await db.fetchval("SELECT count(*) FROM audit_log") == 0
    assert await prune(pg_url, schema, keep_days=30) == []
