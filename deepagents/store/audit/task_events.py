"""One task's audit events, as ``GET /v1/tasks/{id}/events`` and ``deepagents tasks watch``
follow them: from the task's shard outbox (events the audit writer has not drained yet) and
from the audit store (events it has).

Every event is in one of the two places at any time: the writer commits to PostgreSQL
before it deletes the entry from the outbox. Reading the store first and the outbox second
can still miss an event drained in between; the next read finds it in the store, so a
follower that reads again (``TaskEventFollower``) misses nothing.

An event's id is its audit ``event_id`` (a UUIDv7: time-ordered to the millisecond, in
creation order within a process). Events are given in id order; a follower resuming after
an id is given every event whose id sorts after it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg
from redis.asyncio import Redis, RedisCluster

from deepagents.config import Settings
from deepagents.store.audit.decode import BatchDecoder
from deepagents.store.audit.errors import AuditUnavailable
from deepagents.store.audit.events import COLUMNS, Row
from deepagents.store.audit.outbox import Entry
from deepagents.store.tasks import Location
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams.errors import redis_errors

log = logging.getLogger("deepagents.audit")

# The events after which a task's story is over until someone acts (a replay of a dead
# letter starts a new chapter: follow it again with the last id).
FINAL_TYPES = frozenset({"succeeded", "failed", "dropped", "expired", "dead_lettered"})
_JSON_COLUMNS = ("payload", "output", "detail")
_PAGE = 1000  # outbox entries per XRANGE
_SELECT = (
    f"SELECT {', '.join(COLUMNS)} FROM audit_log WHERE task_id = $1 "  # noqa: S608 - constant
    "ORDER BY event_id"
)


@dataclass(frozen=True, slots=True)
class TaskEvent:
    """One audit event of a task: ``data`` holds the audit log's columns that are set."""

    event_id: str
    type: str
    data: dict[str, Any]

    @property
    def final(self) -> bool:
        return self.type in FINAL_TYPES


@dataclass(slots=True)
class OutboxCursor:
    """How far one follower has read a shard's outbox (entries before it are read)."""

    after: str = "-"


def _plain(values: dict[str, Any]) -> TaskEvent:
    data: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        if key in _JSON_COLUMNS and isinstance(value, str):
            value = json.loads(value)
        elif isinstance(value, datetime):
            value = value.isoformat()
        elif key == "event_id":
            value = str(value)
        data[key] = value
    return TaskEvent(str(data["event_id"]), str(data.get("type", "unknown")), data)


def event_from_row(row: Row) -> TaskEvent:
    return _plain(dict(zip(COLUMNS, row, strict=True)))


class TaskEventLog:
    """Reads a task's events; one per process (``aclose`` closes its database pool)."""

    def __init__(self, client: Redis | RedisCluster, keys: Keys, settings: Settings) -> None:
        self.client = client
        self.keys = keys
        self.recorded = settings.outbox
        self._decoder = BatchDecoder.from_settings(settings)  # redacted as the writer does
        self._url = settings.database_url.get_secret_value() if settings.database_url else None
        self._schema = settings.audit_schema
        self._pool: asyncpg.Pool | None = None

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def read(self, location: Location, task_id: str, cursor: OutboxCursor) -> list[TaskEvent]:
        """The task's events in the store, and those in the outbox after ``cursor`` (which
        moves on), de-duplicated and in id order."""
        found = {e.event_id: e for e in await self._stored(task_id)}
        for event in await self._outbox(location, task_id, cursor):
            found.setdefault(event.event_id, event)
        return [found[k] for k in sorted(found)]

    async def _stored(self, task_id: str) -> list[TaskEvent]:
        """The store's events of the task; ``AuditUnavailable`` when it cannot be read (the
        caller then reads nothing, not even the outbox, and tries again later)."""
        if self._url is None:
            return []
        try:
            if self._pool is None:
                self._pool = await asyncpg.create_pool(
                    self._url,
                    min_size=0,
                    max_size=4,
                    timeout=5,
                    command_timeout=10,
                    server_settings={"search_path": self._schema, "timezone": "UTC"},
                )
            rows = await self._pool.fetch(_SELECT, task_id)
        except asyncpg.UndefinedTableError:
            return []  # not migrated yet: the writer has stored nothing
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise AuditUnavailable(f"cannot read the audit store: {exc}") from exc
        return [_plain(dict(r)) for r in rows]

    async def _outbox(
        self, location: Location, task_id: str, cursor: OutboxCursor
    ) -> list[TaskEvent]:
        stream = self.keys.shard(location.agent, location.shard).outbox
        out: list[TaskEvent] = []
        while True:
            start = cursor.after if cursor.after == "-" else f"({cursor.after}"
            with redis_errors("read an outbox stream"):
                page = await self.client.xrange(stream, min=start, count=_PAGE)
            if not page:
                return out
            entries: list[Entry] = [
                (stream, _text(entry_id), dict(fields or {}))  # type: ignore[arg-type]
                for entry_id, fields in page
                if entry_id is not None
            ]
            if not entries:
                return out
            cursor.after = entries[-1][1]
            mine = [e for e in entries if task_id.encode() in e[2].get(b"events", b"")]
            out.extend(
                event
                for event in map(event_from_row, self._decoder.rows(mine))
                if event.data.get("task_id") == task_id
            )
            if len(page) < _PAGE:
                return out


@dataclass(slots=True)
class TaskEventFollower:
    """Follows one task: each ``poll`` gives the events not given before, in id order,
    starting after ``last_id`` (a client's ``Last-Event-ID``)."""

    log: TaskEventLog
    location: Location
    task_id: str
    last_id: str | None = None
    cursor: OutboxCursor = field(default_factory=OutboxCursor)
    given: set[str] = field(default_factory=set)

    async def poll(self) -> list[TaskEvent]:
        """Nothing while the audit store cannot be read: what it holds is older than what
        the outbox holds, and giving the newer first would break the order."""
        try:
            events = await self.log.read(self.location, self.task_id, self.cursor)
        except AuditUnavailable as exc:
            log.warning("task events of %s wait for the audit store: %s", self.task_id, exc)
            return []
        fresh = [
            e
            for e in events
            if e.event_id not in self.given and (self.last_id is None or e.event_id > self.last_id)
        ]
        self.given.update(e.event_id for e in fresh)
        return fresh


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
