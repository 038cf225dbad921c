"""PostgreSQL refusing work while it stays up (RELIABILITY rows 30 and 31): a table locked
by someone else, and no connection slot left. The writer's statements time out instead of
hanging, it retries with backoff while the events wait in Redis, and once PostgreSQL takes
work again every event is stored exactly once."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from urllib.parse import urlsplit

import asyncpg
import pytest
from pydantic import SecretStr
from redis.asyncio import Redis

from deepagents.config import FileConfig, Settings
from deepagents.store.audit.writer import AuditWriter
from deepagents.transport.keys import Keys
from tests.audit.support import drained, fill_outbox, running_writer, sequences
from tests.support.wait import eventually


async def _refused_until_released(
    client: Redis, prefix: str, writer: AuditWriter, release: Callable[[], Awaitable[None]]
) -> dict[str, list[str]]:
    """Events of 200 more tasks arrive while PostgreSQL refuses the writer's writes: it
    fails three more times, retrying each, keeps its batch and stores nothing. Then
    ``release`` ends the refusal and the writer drains. Returns the events' sequences."""
    failures, stored = writer.stats.db_failures, writer.stats.events
    try:
        expected = await fill_outbox(client, prefix, "echo", 2, 200)

        async def failing() -> bool:
            return writer.stats.db_failures >= failures + 3

        await eventually(failing, timeout=30, what="3 more failed writes, each retried")
        assert writer.stats.events == stored
        assert (await writer.backlog()).total > 0  # waiting in Redis
    finally:
        await release()
    await drained(writer)
    return expected


async def test_a_locked_table_times_out_and_is_retried_until_released(
    client: Redis, prefix: str, audit_settings: Settings, config: FileConfig,
    db: asyncpg.Connection, pg_url: str, schema: str,
) -> None:  # fmt: skip
    settings = audit_settings.model_copy(update={"audit_lock_timeout_ms": 200})
    await client.sadd(Keys(prefix).agents_index, "echo")
    expected = await fill_outbox(client, prefix, "echo", 2, 50)
    async with running_writer(client, settings, config) as writer:
        await drained(writer)  # the table exists and takes writes
        locker = await asyncpg.connect(pg_url, server_settings={"search_path": schema})
        await locker.execute("BEGIN; LOCK TABLE audit_log IN ACCESS EXCLUSIVE MODE")
        # Without a lock timeout the first write would wait for as long as the lock is
        # held, and the writer would never count three failures.
        expected |= await _refused_until_released(client, prefix, writer, locker.close)

    assert await sequences(db) == expected


@pytest.fixture
async def limited_url(pg_url: str, schema: str) -> AsyncIterator[str]:
    """The URL of a role allowed one connection at a time, which may create the test's
    schema (and so own what is in it). The role is dropped afterwards."""
    role = f"da_t{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(pg_url)
    try:
        database = await admin.fetchval("SELECT current_database()")
        await admin.execute(f'CREATE ROLE "{role}" LOGIN CONNECTION LIMIT 1')
        await admin.execute(f'GRANT CREATE ON DATABASE "{database}" TO "{role}"')
        parts = urlsplit(pg_url)
        yield parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port or 5432}").geturl()
    finally:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await admin.execute(f'DROP OWNED BY "{role}"')  # and the grant on the database
        await admin.execute(f'DROP ROLE IF EXISTS "{role}"')
        await admin.close()


async def test_no_connection_slot_left_is_retried_until_one_frees(
    client: Redis, prefix: str, audit_settings: Settings, config: FileConfig,
    db: asyncpg.Connection, pg_url: str, limited_url: str,
) -> None:  # fmt: skip
    settings = audit_settings.model_copy(update={"database_url": SecretStr(limited_url)})
    role = urlsplit(limited_url).username
    await client.sadd(Keys(prefix).agents_index, "echo")
    expected = await fill_outbox(client, prefix, "echo", 2, 50)
    async with running_writer(client, settings, config) as writer:
        await drained(writer)
        # The writer's connection dies (as in a server restart) and someone else takes the
        # role's only slot before it reconnects: PostgreSQL answers "too many connections".
        admin = await asyncpg.connect(pg_url)
        try:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role
            )
        finally:
            await admin.close()

        async def take_the_slot() -> asyncpg.Connection | None:
            try:  # the terminated backend may still hold the slot for a moment
                return await asyncpg.connect(limited_url)
            except asyncpg.TooManyConnectionsError:
                return None

        holder = await eventually(take_the_slot, what="the role's one connection slot")
        assert holder is not None  # eventually returns only a truthy value
        expected |= await _refused_until_released(client, prefix, writer, holder.close)

    assert await sequences(db) == expected
