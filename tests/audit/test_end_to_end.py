"""The real runtime (Orchestrator + Worker with the outbox on) feeding the audit writer;
the audit CLI answering from the table; secrets never stored."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider
from redis.asyncio import Redis

from agents.echo import EchoAgent
from deepagents.cli.main import main as cli
from deepagents.config import FileConfig, Settings
from deepagents.orchestrator import Orchestrator
from deepagents.telemetry import Telemetry, Tracing
from tests.audit.support import drained, running_writer, sequences
from tests.support.workers import running_worker

SECRET_KEY = "sk-live-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c"
SECRET_PASSWORD = "hunter2-correct-horse-battery"


async def run_tasks(
    client: Redis,
    settings: Settings,
    config: FileConfig,
    payloads: list[dict[str, Any]],
    telemetry: Telemetry | None = None,
) -> list[str]:
    async with Orchestrator.from_client(
        client, config=config, settings=settings, agents=[EchoAgent], telemetry=telemetry
    ) as orch:
        handles = await orch.submit_many(
            [{"intent": "echo", "payload": p, "tenant": "acme"} for p in payloads]
        )
        results = await asyncio.gather(*(h.result(timeout=60) for h in handles))
    assert all(r.status.value == "success" for r in results)
    return [h.task_id for h in handles]


async def test_real_runtime_events_land_once_in_order_and_redacted(
    client: Redis, audit_settings: Settings, config: FileConfig, db: asyncpg.Connection,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    secret = {"api_key": SECRET_KEY, "nested": {"password": SECRET_PASSWORD}, "note": "hello"}
    payloads = [{"n": i} for i in range(199)] + [secret]
    async with running_worker(client, audit_settings, config), \
            running_writer(client, audit_settings, config) as writer:  # fmt: skip
        # Tracing on (a recording SDK provider): every task gets its own trace id.
        traced = Telemetry(metrics=None, tracing=Tracing(TracerProvider()))
        task_ids = await run_tasks(client, audit_settings, config, payloads, traced)
        await drained(writer)

    seqs = await sequences(db)
    assert set(seqs) == set(task_ids)
    assert all(seq == ["submitted", "started", "succeeded"] for seq in seqs.values())

    # The secret payload was submitted and echoed back: neither copy is stored in clear.
    dump = await db.fetchval("SELECT string_agg(audit_log::text, '\n') FROM audit_log")
    assert SECRET_KEY not in dump and SECRET_PASSWORD not in dump
    row = await db.fetchrow(
        "SELECT payload, output, trace_id FROM audit_log WHERE task_id = $1 AND type = 'succeeded'",
        task_ids[-1],
    )
    assert row is not None
    assert orjson.loads(row["output"])["output"] == {
        "api_key": "[REDACTED]",
        "nested": {"password": "[REDACTED]"},
        "note": "hello",
    }

    # The CLI answers from the same table (in a thread: it runs its own event loop).
    monkeypatch.setenv("DEEPAGENTS_DATABASE_URL", audit_settings.database_url.get_secret_value())  # type: ignore[union-attr]
    monkeypatch.setenv("DEEPAGENTS_AUDIT_SCHEMA", audit_settings.audit_schema)
    monkeypatch.setenv("COLUMNS", "200")  # rich folds cells on a narrow terminal
    assert await asyncio.to_thread(cli, ["audit", "show", task_ids[0], "--json"]) == 0
    shown: list[dict[str, Any]] = orjson.loads(capsys.readouterr().out)
    assert [e["type"] for e in shown] == ["submitted", "started", "succeeded"]
    assert await asyncio.to_thread(cli, ["audit", "show", task_ids[0]]) == 0
    table = capsys.readouterr().out
    assert "submitted" in table and "succeeded" in table and "echo@1.0.0" in table
    assert row["trace_id"], "a traced task's events carry no trace id"
    assert await asyncio.to_thread(cli, ["audit", "trace", row["trace_id"], "--json"]) == 0
    found = orjson.loads(capsys.readouterr().out)
    assert {e["task_id"] for e in found} == {task_ids[-1]}
    assert [e["type"] for e in found] == ["submitted", "started", "succeeded"]
    assert (
        await asyncio.to_thread(cli, ["audit", "cost", "--since", "1h", "--by", "tenant", "--json"])
        == 0
    )
    cost = orjson.loads(capsys.readouterr().out)
    assert cost["rows"][0]["key"] == "acme" and cost["rows"][0]["tasks"] == 200
