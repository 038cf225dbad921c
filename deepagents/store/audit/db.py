"""Connections to the audit database: one schema, bounded statement and lock waits."""

from __future__ import annotations

import re

import asyncpg

from deepagents.config import Settings
from deepagents.store.audit.errors import AuditUnavailable, NoDatabase, is_transient

_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def checked_schema(schema: str) -> str:
    """Schema names reach SQL as identifiers, so only an allow-listed shape is accepted."""
    if not _SCHEMA.match(schema):
        raise NoDatabase(f"invalid audit schema name {schema!r} (lower-case letters, digits, _)")
    return schema


def quote_ident(name: str) -> str:
    return '"' + checked_schema(name) + '"'


def database_url(settings: Settings) -> str:
    if settings.database_url is None:
        raise NoDatabase(
            "DEEPAGENTS_DATABASE_URL is not set (postgresql://user@host:5432/db); "
            "`deepagents demo` starts an embedded PostgreSQL instead"
        )
    return settings.database_url.get_secret_value()


async def connect(
    url: str,
    schema: str,
    *,
    connect_timeout_s: float = 10.0,
    statement_timeout_ms: int = 30_000,
    lock_timeout_ms: int = 5_000,
) -> asyncpg.Connection:
    """A connection whose unqualified names resolve in ``schema``.

    The timeouts make a locked table or a stalled server an error we retry with backoff,
    never a writer blocked forever (RELIABILITY row 30).
    """
    try:
        return await asyncpg.connect(
            url,
            timeout=connect_timeout_s,
            server_settings={
                "search_path": checked_schema(schema),
                "application_name": "deepagents-audit",
                "statement_timeout": str(statement_timeout_ms),
                "lock_timeout": str(lock_timeout_ms),
                "timezone": "UTC",
                # The writer acks Redis after COMMIT returns: that must mean durable, even
                # on a server configured with asynchronous commit.
                "synchronous_commit": "on",
            },
        )
    except Exception as exc:
        if is_transient(exc):
            raise AuditUnavailable(f"cannot reach PostgreSQL: {type(exc).__name__}: {exc}") from exc
        raise
