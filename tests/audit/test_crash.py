"""``kill -9`` of the audit writer after its commit and before its ack: the restarted
writer (same consumer: re-reads its pending; another one: reclaims them) stores nothing
twice."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest
from redis.asyncio import Redis

from deepagents.config import Settings
from deepagents.store.audit.outbox import GROUP
from deepagents.transport.keys import Keys
from tests.audit.support import fill_outbox, sequences
from tests.support.wait import eventually


def writer_env(settings: Settings, config_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEEPAGENTS_")}
    env.update({
        "DEEPAGENTS_REDIS_URL": settings.redis_url.get_secret_value(),  # type: ignore[union-attr]
        "DEEPAGENTS_DATABASE_URL": settings.database_url.get_secret_value(),  # type: ignore[union-attr]
        "DEEPAGENTS_PREFIX": settings.prefix,
        "DEEPAGENTS_CONFIG": str(config_path),
        "DEEPAGENTS_AUDIT_SCHEMA": settings.audit_schema,
        "DEEPAGENTS_AUDIT_BATCH_SIZE": "500",
        "DEEPAGENTS_AUDIT_BATCH_WAIT_MS": "50",
    })  # fmt: skip
    env.update(extra)
    return env


def spawn(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "deepagents.cli.audit_writer"], env=env, stdout=out, stderr=out
        )


async def pending(client: Redis, stream: str) -> int:
    return int((await client.xpending(stream, GROUP))["pending"])


@pytest.mark.parametrize("same_consumer", [True, False], ids=["same-consumer", "reclaimed"])
async def test_kill_9_between_commit_and_ack_leaves_no_duplicates(
    client: Redis, prefix: str, audit_settings: Settings, config_path: Path,
    db: asyncpg.Connection, tmp_path: Path, same_consumer: bool,
) -> None:  # fmt: skip
    keys = Keys(prefix)
    await client.sadd(keys.agents_index, "echo")
    expected = await fill_outbox(client, prefix, "echo", 2, 1_000)
    streams = [keys.shard("echo", s).outbox for s in range(2)]
    log = tmp_path / "writer.log"

    first = spawn(writer_env(audit_settings, config_path, DEEPAGENTS_CONSUMER="w1",
                             DEEPAGENTS_FAULT="crash_after_commit"), log)  # fmt: skip
    assert first.wait(timeout=60) == -9, log.read_text()
    committed = await db.fetchval("SELECT count(*) FROM audit_log")
    assert committed > 0  # the batch is in PostgreSQL ...
    assert sum([await pending(client, s) for s in streams]) > 0  # ... and still unacked

    second = spawn(writer_env(audit_settings, config_path,
                              DEEPAGENTS_CONSUMER="w1" if same_consumer else "w2",
                              DEEPAGENTS_AUDIT_CLAIM_IDLE_MS="200"), log)  # fmt: skip
    try:

        async def empty() -> bool:
            return sum([await client.xlen(s) for s in streams]) == 0

        await eventually(empty, timeout=60, interval=0.1, what="outbox drained after restart")
    finally:
        second.terminate()
        assert second.wait(timeout=30) == 0, log.read_text()

    assert await sequences(db) == expected  # every task's events, each once
    text = log.read_text()
    # The batch committed before the kill was read again: the de-dup insert skipped it
    # (the conflict path), rather than the restarted writer not seeing it at all.
    skipped = [int(n) for n in re.findall(r"audit writer stopped: .*duplicates=(\d+)", text)]
    assert len(skipped) == 1 and skipped[0] > 0, text[-2000:]
    assert "fault injection: crash_after_commit" in text
    if not same_consumer:
        assert "reclaimed" in text
