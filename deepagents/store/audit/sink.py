"""The bulk write path: COPY a batch into a temporary staging table, then one
``INSERT ... SELECT ... ON CONFLICT (event_id, ts) DO NOTHING`` into ``audit_log``.

COPY cannot skip duplicates by itself; staging gives COPY's speed and de-duplication in
the same transaction. The sink owns its single connection and reconnects after a failure.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import UTC, date
from typing import Any

import asyncpg

from deepagents.store.audit.db import connect
from deepagents.store.audit.errors import AuditUnavailable, is_transient
from deepagents.store.audit.events import COLUMNS, Row
from deepagents.store.audit.migrate import ensure_partitions

log = logging.getLogger("deepagents.audit")

_COLS = ", ".join(COLUMNS)  # a constant of this module, never user input
_STAGE = (
    "CREATE TEMP TABLE IF NOT EXISTS audit_stage (LIKE audit_log INCLUDING DEFAULTS) "
    "ON COMMIT DELETE ROWS"
)
_INSERT = (
    f"INSERT INTO audit_log ({_COLS}) SELECT {_COLS} FROM audit_stage "  # noqa: S608 - constant
    "ON CONFLICT (event_id, ts) DO NOTHING"
)
_TS = COLUMNS.index("ts")


class PgSink:
    def __init__(
        self,
        url: str,
        schema: str,
        *,
        lock_timeout_ms: int = 5_000,
        statement_timeout_ms: int = 30_000,
    ) -> None:
        self.url = url
        self.schema = schema
        self._timeouts = {
            "lock_timeout_ms": lock_timeout_ms,
            "statement_timeout_ms": statement_timeout_ms,
        }
        self._conn: asyncpg.Connection | None = None
        self._days: set[date] = set()  # partitions known to exist

    async def write(self, rows: list[Row]) -> int:
        """Store ``rows`` (skipping event ids already stored); return how many were new.

        Raises AuditUnavailable for failures that pass (retry later), the asyncpg error
        for a batch PostgreSQL refuses as such (the caller stores it row by row).
        """
        if not rows:
            return 0
        try:
            conn = await self._connection()
            await self._ensure_days(conn, {r[_TS].astimezone(UTC).date() for r in rows})
            async with conn.transaction():
                await conn.copy_records_to_table("audit_stage", records=rows, columns=COLUMNS)
                status = await conn.execute(_INSERT)
        except Exception as exc:
            # "no partition of relation found for row": a partition we knew of was dropped
            # by retention meanwhile; forget what we know and retry (it is re-created).
            if isinstance(exc, asyncpg.CheckViolationError) and "partition" in str(exc):
                self._days.clear()
                raise AuditUnavailable(f"audit partition vanished: {exc}") from exc
            await self._fail(exc)
            raise
        return int(status.rsplit(" ", 1)[-1])

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            try:
                await conn.close(timeout=5)
            except Exception:
                conn.terminate()

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[asyncpg.Connection]:
        """The sink's connection for other statements (maintenance), same error handling."""
        try:
            yield await self._connection()
        except Exception as exc:
            await self._fail(exc)
            raise
        finally:
            self._days.clear()  # partitions may have been created or dropped meanwhile

    async def _fail(self, exc: BaseException) -> None:
        """After a transient failure the connection is suspect: drop it, say unavailable."""
        if is_transient(exc):
            await self.close()
            raise AuditUnavailable(f"audit database failed: {type(exc).__name__}: {exc}") from exc

    async def _connection(self) -> asyncpg.Connection:
        if self._conn is None or self._conn.is_closed():
            conn = await connect(self.url, self.schema, **self._timeouts)
            try:
                await conn.execute(_STAGE)
            except BaseException:
                conn.terminate()  # ours alone until returned: never left to the collector
                raise
            self._conn = conn
        return self._conn

    async def _ensure_days(self, conn: asyncpg.Connection, days: set[date]) -> None:
        missing = days - self._days
        if missing:
            await ensure_partitions(conn, sorted(missing))
            self._days |= missing

    def __repr__(self) -> str:
        return f"PgSink(schema={self.schema!r}, connected={self._conn is not None})"

    async def __aenter__(self) -> PgSink:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
