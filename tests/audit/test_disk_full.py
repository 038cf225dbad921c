"""The disk under PostgreSQL fills up while the audit writer runs (RELIABILITY row 32).
Writes fail (or the server stops, when it cannot write its WAL); the writer keeps its
batch and acks nothing it has not stored; once space is freed (and the server started
again, if it stopped) every event is stored exactly once.

Needs root to mount a tmpfs as the disk; skipped where that is not allowed."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import asyncpg
import pytest
from pydantic import SecretStr
from redis.asyncio import Redis

from deepagents.config import FileConfig, Settings
from deepagents.store.audit.embedded import EmbeddedPostgres
from deepagents.transport.keys import Keys
from tests.audit.support import drained, fill_outbox, running_writer, sequences
from tests.support.disk import fill, small_disk
from tests.support.wait import eventually


@pytest.fixture
def pg_on_small_disk() -> Iterator[EmbeddedPostgres]:
    with small_disk(96) as disk, EmbeddedPostgres(root=disk) as server:
        yield server


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.5).close()
    except OSError:
        return False
    return True


async def test_a_full_disk_under_postgres_loses_nothing(
    client: Redis, prefix: str, audit_settings: Settings, config: FileConfig,
    pg_on_small_disk: EmbeddedPostgres,
) -> None:  # fmt: skip
    pg = pg_on_small_disk
    settings = audit_settings.model_copy(update={"database_url": SecretStr(pg.url)})
    await client.sadd(Keys(prefix).agents_index, "echo")
    expected = await fill_outbox(client, prefix, "echo", 2, 50)
    assert pg.dir is not None
    ballast = pg.dir / "fill"
    async with running_writer(client, settings, config) as writer:
        await drained(writer)
        fill(ballast)
        failures, stored = writer.stats.db_failures, writer.stats.events
        expected |= await fill_outbox(client, prefix, "echo", 2, 300)

        async def refused() -> bool:
            return writer.stats.db_failures >= failures + 3

        await eventually(refused, timeout=60, what="writes refused and retried")
        assert writer.stats.events == stored  # nothing stored, so nothing acked
        assert (await writer.backlog()).total > 0
        ballast.unlink()
        if not _listening(pg.port):  # it stopped: the WAL could not be written
            pg.start()
        await drained(writer, timeout=120)

    conn = await asyncpg.connect(pg.url, server_settings={"search_path": settings.audit_schema})
    try:
        assert await sequences(conn) == expected
    finally:
        await conn.close()
