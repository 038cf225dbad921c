"""Helpers of the audit tests: realistic outbox entries, a running writer, table reads."""

from __future__ import annotations

import contextlib
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import orjson
from redis.asyncio import Redis, RedisCluster
from uuid6 import uuid7

from deepagents.config import FileConfig, Settings
from deepagents.contract.events import audit_event
from deepagents.store.audit.writer import AuditWriter
from deepagents.transport.keys import Keys, shard_of
from tests.support.wait import eventually
from tests.support.workers import running


def traceparent() -> str:
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"


def task_events(
    agent: str, shard: int, base: datetime, *, fail: bool = False
) -> list[list[dict[str, Any]]]:
    """One task's outbox entries, as the runtime writes them: the submit entry, then the
    commit entry (started + outcome); a failing task has a retry in between."""
    task_id = str(uuid7())
    common = {
        "agent": agent,
        "shard": shard,
        "tier": "p2",
        "tenant": "acme",
        "traceparent": traceparent(),
    }
    payload = {"text": "x" * 200, "customer": {"id": 42, "country": "FR"}, "amount": 12.5}
    ts = [base + timedelta(milliseconds=i) for i in range(5)]

    def ev(kind: str, i: int, **fields: Any) -> dict[str, Any]:
        event = audit_event(kind, task_id, **common, **fields)
        event["ts"] = ts[i].isoformat()
        return event

    entries = [[ev("submitted", 0, intent="echo", payload=payload)]]
    if fail:
        entries.append([ev("retried", 1, attempt=1, reason="timeout", delay_ms=10, to_tier="p2")])
    result: dict[str, Any] = {
        "task_id": task_id, "status": "failed" if fail else "success", "output": payload,
        "agent": agent, "agent_version": "1.0.0",
        "metrics": {"latency_ms": 3.2, "queue_ms": 1.0, "tokens_used": 120, "cost_usd": 0.0012},
    }  # fmt: skip
    if fail:
        result["error"] = {"code": "agent_error", "message": "boom"}
    kind = "failed" if fail else "succeeded"
    entries.append(
        [
            ev("started", 2, attempt=2 if fail else 1, agent_version="1.0.0", queue_ms=1.0),
            ev(kind, 3, attempt=2 if fail else 1, agent_version="1.0.0", result=result),
        ]
    )
    return entries


async def fill_outbox(
    client: Redis | RedisCluster,
    prefix: str,
    agent: str,
    shards: int,
    tasks: int,
    *,
    fail_every: int = 0,
) -> dict[str, list[str]]:
    """XADD ``tasks`` tasks' events; return the expected event types per task, in order."""
    keys = Keys(prefix)
    expected: dict[str, list[str]] = {}
    base = datetime.now(UTC)
    pipe = client.pipeline(transaction=False)
    for i in range(tasks):
        fail = bool(fail_every) and i % fail_every == 0
        entries = task_events(agent, 0, base + timedelta(microseconds=i), fail=fail)
        task_id = entries[0][0]["task_id"]
        shard = shard_of(task_id, shards)
        for entry in entries:
            for e in entry:
                e["shard"] = shard
            pipe.xadd(keys.shard(agent, shard).outbox, {"events": orjson.dumps(entry)})
        expected[task_id] = [e["type"] for entry in entries for e in entry]
        if len(pipe) >= 2000:
            await pipe.execute()
    await pipe.execute()
    return expected


def running_writer(
    client: Redis | RedisCluster, settings: Settings, config: FileConfig, **kwargs: Any
) -> contextlib.AbstractAsyncContextManager[AuditWriter]:
    return running(AuditWriter(client, settings=settings, config=config, **kwargs))


async def drained(writer: AuditWriter, *, timeout: float = 60.0) -> None:
    async def empty() -> bool:
        await writer.outbox.discover(force=True)
        return (await writer.backlog()).total == 0

    await eventually(empty, timeout=timeout, interval=0.1, what="audit backlog drained")


async def sequences(db: asyncpg.Connection) -> dict[str, list[str]]:
    rows = await db.fetch("SELECT task_id, type FROM audit_log ORDER BY task_id, ts, event_id")
    out: dict[str, list[str]] = {}
    for r in rows:
        out.setdefault(r["task_id"], []).append(r["type"])
    return out
