"""A task's events as ``GET /v1/tasks/{id}/events`` reads them (``TaskEventLog``): from the
outbox while the audit writer has not drained them, from PostgreSQL once it has: the same
ids, the same (redacted) fields, in id order; a follower across the drain gives each event
once, and one resumed after an id gives the rest."""

from __future__ import annotations

import asyncpg
from redis.asyncio import Redis

from agents.echo import EchoAgent
from deepagents.config import FileConfig, Settings
from deepagents.orchestrator import Orchestrator
from deepagents.store.audit.task_events import OutboxCursor, TaskEventFollower, TaskEventLog
from deepagents.store.tasks import Location
from deepagents.transport.keys import Keys
from tests.audit.support import drained, running_writer
from tests.support.workers import running_worker

SECRET = "sk-live-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c"


async def test_events_are_the_same_before_and_after_the_writer_drains_them(
    client: Redis, audit_settings: Settings, config: FileConfig, db: asyncpg.Connection
) -> None:
    async with (
        running_worker(client, audit_settings, config),
        Orchestrator.from_client(
            client, config=config, settings=audit_settings, agents=[EchoAgent]
        ) as orch,
    ):
        handle = await orch.submit({"intent": "echo", "payload": {"api_key": SECRET, "n": 1}})
        await handle.result(timeout=60)
        location = Location(handle.agent, handle.shard, handle.tier)
    log = TaskEventLog(client, Keys(audit_settings.prefix), audit_settings)
    try:
        follower = TaskEventFollower(log, location, handle.task_id)
        before = await log.read(location, handle.task_id, OutboxCursor())
        assert [e.type for e in before] == ["submitted", "started", "succeeded"]
        assert [e.event_id for e in await follower.poll()] == [e.event_id for e in before]
        assert SECRET not in str([e.data for e in before])  # redacted as the writer does

        async with running_writer(client, audit_settings, config) as writer:
            await drained(writer)
        assert await db.fetchval("SELECT count(*) FROM audit_log") == 3

        after = await log.read(location, handle.task_id, OutboxCursor())
        assert [e.event_id for e in after] == [e.event_id for e in before]
        for old, new in zip(before, after, strict=True):
            assert {k: v for k, v in old.data.items() if k != "ts"} == {
                k: v for k, v in new.data.items() if k != "ts"
            }
        assert await follower.poll() == []  # each event once, across the drain
        resumed = TaskEventFollower(log, location, handle.task_id, before[0].event_id)
        assert [e.event_id for e in await resumed.poll()] == [e.event_id for e in before[1:]]
    finally:
        await log.aclose()
