"""Versioned SQL migrations (``sql/NNNN_name.sql``), applied once each, in order.

``migrate`` is safe to run from several processes at once (every replica may run it at
start): a session-level ``pg_advisory_lock`` per schema serialises them, the first one
applies what is missing and the others find nothing left to do. Each migration runs in
its own transaction with the row recording it, so a failure leaves no half-applied
version. A migration edited after it was applied is refused (checksum mismatch).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from importlib import resources

import asyncpg

from deepagents.store.audit.db import connect, quote_ident
from deepagents.store.audit.errors import MigrationError

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
DAYS_AHEAD = 7

_CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS deepagents_migrations (
    version    integer PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""


_RECORD = "INSERT INTO deepagents_migrations (version, name, checksum) VALUES ($1, $2, $3)"


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def migrations() -> list[Migration]:
    found = []
    for entry in resources.files("deepagents.store.audit").joinpath("sql").iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text("utf-8")))
    return sorted(found, key=lambda m: m.version)


async def migrate(url: str, schema: str, *, days_ahead: int = DAYS_AHEAD) -> list[str]:
    """Apply the missing migrations; return the names applied (empty when up to date)."""
    conn = await connect(url, schema, statement_timeout_ms=0, lock_timeout_ms=0)
    try:
        # Key per schema: tests (and tenants) in other schemas never wait on each other.
        await conn.execute("SELECT pg_advisory_lock(hashtext($1))", f"deepagents.migrate:{schema}")
        try:
            applied = await _apply_missing(conn, schema)
            today = _today()
            ahead = day_range(today - timedelta(days=1), today + timedelta(days=days_ahead))
            await ensure_partitions(conn, ahead)
        finally:
            await conn.execute(
                "SELECT pg_advisory_unlock(hashtext($1))", f"deepagents.migrate:{schema}"
            )
    finally:
        await conn.close()
    return applied


async def _apply_missing(conn: asyncpg.Connection, schema: str) -> list[str]:
    # The schema name is allow-listed by quote_ident (a regex), never free text.
    await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(schema)}")
    await conn.execute(_CREATE_TABLE)
    done = {
        r["version"]: r["checksum"]
        for r in await conn.fetch("SELECT version, checksum FROM deepagents_migrations")
    }
    applied: list[str] = []
    for mig in migrations():
        if mig.version in done:
            if done[mig.version] != mig.checksum:
                raise MigrationError(
                    f"migration {mig.version:04d}_{mig.name} changed after it was applied; "
                    "add a new migration instead of editing an applied one"
                )
            continue
        try:
            async with conn.transaction():
                await conn.execute(mig.sql)
                await conn.execute(
                    _RECORD,
                    mig.version, mig.name, mig.checksum,
                )  # fmt: skip
        except asyncpg.PostgresError as exc:
            raise MigrationError(f"migration {mig.version:04d}_{mig.name} failed: {exc}") from exc
        applied.append(f"{mig.version:04d}_{mig.name}")
    return applied


def day_range(first: date, last: date) -> list[date]:
    return [first + timedelta(days=i) for i in range((last - first).days + 1)]


async def ensure_partitions(conn: asyncpg.Connection, days: list[date]) -> int:
    """Create the missing day partitions of ``days``; return how many were created."""
    return int(
        await conn.fetchval(
            "SELECT count(*) FILTER (WHERE audit_ensure_partition(d)) FROM unnest($1::date[]) d",
            days,
        )
    )


async def drop_partitions_before(conn: asyncpg.Connection, cutoff: date) -> list[str]:
    rows = await conn.fetch("SELECT * FROM audit_drop_partitions_before($1)", cutoff)
    return [r[0] for r in rows]


async def prune(url: str, schema: str, keep_days: int) -> list[str]:
    """Drop the partitions older than ``keep_days`` days (retention)."""
    conn = await connect(url, schema)
    try:
        # Large step records past their expiry (their Redis references are gone by then).
        await conn.execute("DELETE FROM step_bodies WHERE expires_at < now()")
        return await drop_partitions_before(conn, _today() - timedelta(days=keep_days))
    finally:
        await conn.close()


def _today() -> date:
    return datetime.now(UTC).date()
