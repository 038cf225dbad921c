"""The claim-check store in PostgreSQL (table ``step_bodies``, created by ``deepagents db
migrate``), in the audit database and schema. One small pool, opened on first use: a
worker whose steps all fit in Redis never connects."""

from __future__ import annotations

import asyncio
from typing import Any

from deepagents._internal.ids import uuid7_str
from deepagents.config import Settings
from deepagents.store.claims import ClaimStore

_PUT = """INSERT INTO step_bodies (ref, task_id, body, expires_at)
VALUES ($1, $2, $3, now() + make_interval(secs => $4))"""
_GET = "SELECT body FROM step_bodies WHERE ref = $1 AND expires_at > now()"


class PgClaims:
    def __init__(self, url: str, schema: str, *, max_connections: int = 4) -> None:
        self.url, self.schema, self.max_connections = url, schema, max_connections
        self._pool: Any = None
        self._lock = asyncio.Lock()

    async def _ready(self) -> Any:
        if self._pool is None:
            async with self._lock:
                if self._pool is None:
                    self._pool = await _open_pool(self.url, self.schema, self.max_connections)
        return self._pool

    async def put(self, task_id: str, body: bytes, ttl_s: int) -> str:
        ref = f"pg:{uuid7_str()}"
        with _errors("store a large step record"):
            pool = await self._ready()
            await pool.execute(_PUT, ref, task_id, body, float(ttl_s))
        return ref

    async def get(self, ref: str) -> bytes | None:
        with _errors("read a large step record"):
            pool = await self._ready()
            found = await pool.fetchval(_GET, ref)
        return None if found is None else bytes(found)

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


async def _open_pool(url: str, schema: str, size: int) -> Any:
    from deepagents._internal.extras import require_extra

    require_extra("audit", "step records over step_inline_bytes (a claim check in PostgreSQL)")
    import asyncpg

    from deepagents.store.audit.db import checked_schema

    return await asyncpg.create_pool(
        url,
        min_size=0,
        max_size=size,
        timeout=10.0,
        server_settings={
            "search_path": checked_schema(schema),
            "application_name": "deepagents-steps",
            "statement_timeout": "30000",
            "synchronous_commit": "on",  # recorded in Redis only once durable here
        },
    )


def _errors(what: str) -> Any:
    from deepagents.store.audit.errors import database_errors

    return database_errors(what)


def claim_store(settings: Settings) -> ClaimStore | None:
    """PostgreSQL when DEEPAGENTS_DATABASE_URL is set; otherwise none: a step record over
    ``step_inline_bytes`` then fails its task ``step_too_large``."""
    if settings.database_url is None:
        return None
    return PgClaims(settings.database_url.get_secret_value(), settings.audit_schema)
