"""Durable steps and PostgreSQL. Step records over ``step_inline_bytes`` go there as a
claim check (table ``step_bodies``, created by ``deepagents db migrate``): Redis holds
``@pg:<ref>``, the body lives in the database, and a later delivery reads it back. And each
recorded step, and the delivery that resumed past them, is in the task's audit trail."""

from __future__ import annotations

import asyncio

import asyncpg
import orjson
import pytest
from redis.asyncio import Redis

from deepagents.cli.main import main as cli
from deepagents.config import FileConfig, Settings
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from deepagents.store.audit.migrate import migrate
from tests.audit.support import drained, running_writer, sequences
from tests.steps_agents import LargeAgent
from tests.support.replies import as_bytes
from tests.support.workers import running_worker

CONFIG = FileConfig.model_validate(
    {
        "defaults": {"shards": 1, "block_ms": 100},
        "agents": {"large": {"class": "tests.steps_agents:LargeAgent",
                             "settings": {"step_inline_bytes": 1024}}},
    }
)  # fmt: skip


async def test_a_large_step_result_is_kept_in_postgres_behind_a_claim_check(
    client: Redis, audit_settings: Settings, pg_url: str, schema: str, db: asyncpg.Connection
) -> None:
    await migrate(pg_url, schema)
    async with (
        running_worker(client, audit_settings, CONFIG, LargeAgent()),
        Orchestrator.from_client(client, config=CONFIG, settings=audit_settings) as orch,
    ):
        handle = await orch.submit(Task(intent="large", payload={"size": 5000, "fail_once": True}))
        result = await handle.result(timeout=30)
    assert result.status is ResultStatus.SUCCESS and result.output == {"len": 5000}
    assert result.metrics.attempts == 2  # the second delivery read the big result back
    steps = f"{audit_settings.prefix}:{{large:0}}:s:{handle.task_id}"
    ref = as_bytes(await client.hget(steps, "step:big"))
    assert ref.startswith(b"@pg:")
    row = await db.fetchrow(
        "SELECT task_id, body, expires_at > now() + interval '1 day' AS kept "
        "FROM step_bodies WHERE ref = $1",
        ref[1:].decode(),
    )
    assert row is not None and row["task_id"] == handle.task_id and row["kept"]
    assert orjson.loads(row["body"]) == "y" * 5000
    assert await client.hget(steps, "step:measure") == b"5000"


async def test_steps_are_in_the_audit_trail_with_the_resume(
    client: Redis,
    audit_settings: Settings,
    pg_url: str,
    schema: str,
    db: asyncpg.Connection,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await migrate(pg_url, schema)
    async with (
        running_worker(client, audit_settings, CONFIG, LargeAgent()),
        running_writer(client, audit_settings, CONFIG) as writer,
        Orchestrator.from_client(client, config=CONFIG, settings=audit_settings) as orch,
    ):
        handle = await orch.submit(Task(intent="large", payload={"size": 10, "fail_once": True}))
        assert (await handle.result(timeout=30)).status is ResultStatus.SUCCESS
        await drained(writer)
    trail = (await sequences(db))[handle.task_id]
    assert trail == [
        "submitted", "started", "step_completed", "retried",
        "started", "resumed", "step_completed", "succeeded",
    ]  # fmt: skip
    rows = await db.fetch(
        "SELECT detail, latency_ms, deliveries FROM audit_log "
        "WHERE task_id = $1 AND type = 'step_completed' ORDER BY ts",
        handle.task_id,
    )
    details = [orjson.loads(r["detail"]) for r in rows]
    assert [(d["step"], d["phase"], d["bytes"]) for d in details] == [
        ("big", "main", 12),
        ("measure", "main", 2),
    ]
    assert all(r["latency_ms"] is not None for r in rows)
    assert [r["deliveries"] for r in rows] == [1, 2]
    monkeypatch.setenv("DEEPAGENTS_DATABASE_URL", pg_url)
    monkeypatch.setenv("DEEPAGENTS_AUDIT_SCHEMA", schema)
    monkeypatch.setenv("COLUMNS", "200")
    assert await asyncio.to_thread(cli, ["audit", "show", handle.task_id]) == 0
    table = capsys.readouterr().out
    assert "main · big (12 B)" in table and "1 steps done before" in table
