"""Replies to tasks waiting on a person (``Orchestrator.reply``), and the open questions.

A reply is validated against the JSON Schema the task stored with its question, then
applied by one script on the task's shard slot (``answer.lua``): it checks that the task
waits for this very question, stores the answer and re-enqueues the task on its tier. A
second reply, or one racing the wait's timeout or a cancel, changes nothing and is told why.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from deepagents.contract.answer_schema import UnsafePattern, first_error
from deepagents.contract.codec import DamagedRecord
from deepagents.contract.event_sink import EventSink
from deepagents.contract.events import AuditEvent
from deepagents.errors import (
    AlreadyReplied,
    InvalidReply,
    NotWaiting,
    PayloadTooLarge,
    ReplyTaskNotFound,
)
from deepagents.store.base import TaskRecords
from deepagents.telemetry.metrics import Metrics
from deepagents.transport.base import HumanWaits, Waiting, WaitingCursor, now_ms
from deepagents.transport.keys import Keys, ShardKeys, parked_version

# Runs a reply's schema check, a blocking call, where and on whose budget its caller says.
CheckRunner = Callable[[Callable[[], None]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Replied:
    task_id: str
    ask: str
    waited_s: float  # the question's age when the answer landed


@dataclass(frozen=True, slots=True)
class Question:
    """What a waiting task asks, for status views."""

    ask: str
    question: str
    schema: dict[str, Any]
    asked_ms: int
    due_ms: int
    on_timeout: str


def question_of(info: dict[str, Any]) -> Question | None:
    """The open question in a task hash's fields; None unless the task is waiting."""
    if info.get("state") != "waiting":
        return None
    try:
        asked_ms, due_ms = int(info.get("asked_ms") or 0), int(info.get("wait_due_ms") or 0)
    except ValueError:
        raise DamagedRecord("question", "the task's question record is damaged") from None
    return Question(
        ask=str(info.get("ask", "")),
        question=str(info.get("question", "")),
        schema=answer_schema(info.get("ask_schema") or "{}"),
        asked_ms=asked_ms,
        due_ms=due_ms,
        on_timeout=str(info.get("on_timeout", "")),
    )


def answer_schema(schema_json: str) -> dict[str, Any]:
    """A question's stored answer schema; ``DamagedRecord`` unless a JSON object."""
    try:
        schema = orjson.loads(schema_json)
    except orjson.JSONDecodeError:
        schema = None
    if not isinstance(schema, dict):
        raise DamagedRecord("question", "the question's answer schema is damaged (not an object)")
    return schema


class Replies:
    def __init__(
        self,
        bus: HumanWaits,
        tasks: TaskRecords,
        keys: Keys,
        *,
        events: EventSink,
        metrics: Metrics | None,
        max_answer_bytes: int,
    ) -> None:
        self.bus, self.tasks, self.keys = bus, tasks, keys
        self.events, self.metrics, self.max_answer_bytes = events, metrics, max_answer_bytes

    async def reply(
        self, task_id: str, answer: Any, tiers: Sequence[str], run_check: CheckRunner | None = None
    ) -> Replied:
        """``run_check`` runs the schema check (the gateway: in its parse thread, on the
        tenant's parse budget); inline without it."""
        loc = await self.tasks.location(task_id, what="reply")
        info = {} if loc is None else await self.tasks.task_fields(loc, task_id)
        if loc is None or not info:
            raise ReplyTaskNotFound(f"no task {task_id}")
        ask = info.get("ask", "")
        # Under a rollout the task resumes on the streams of the version it was parked from
        # (where its wait's member is); the location names only agent, shard and tier.
        keys = self.keys.shard(loc.agent, loc.shard, parked_version(info))
        if info.get("state") == "waiting":  # else the script says why it cannot take it
            asked = await self.bus.asked(keys, task_id)
            schema_json = asked.get("ask_schema") or "{}"
            if run_check is None:
                _validate(answer, schema_json)
            else:
                await run_check(lambda: _validate(answer, schema_json))
        answer_json = orjson.dumps(answer)
        if len(answer_json) > self.max_answer_bytes:
            raise PayloadTooLarge(
                f"the answer is {len(answer_json)} bytes; the limit is {self.max_answer_bytes}"
            )
        replied = AuditEvent.of(
            "replied", task_id, agent=loc.agent, ask=ask, asked_ms=info.get("asked_ms")
        )
        events = self.events.keep([replied])
        done = await self.bus.answer(keys, tiers, task_id, ask, answer_json, events)
        if done.status == "missing":
            raise ReplyTaskNotFound(f"no task {task_id}")
        if done.status == "already_replied":
            raise AlreadyReplied(f"task {task_id}: question {ask} was answered already")
        if done.status == "not_waiting":
            raise NotWaiting(
                f"task {task_id} is {done.state or 'gone'}: it waits for no reply", state=done.state
            )
        waited = max(0.0, (now_ms() - done.asked_ms) / 1000)
        if self.metrics is not None:
            self.metrics.human_wait.labels(loc.agent, "replied").observe(waited)
        return Replied(task_id, ask, waited)

    async def waiting(
        self, shards: Iterable[tuple[str, int]], limit: int = 100, tenant: str | None = None
    ) -> list[Waiting]:
        """The oldest ``limit`` open questions over the given (agent, shard)s, oldest first;
        with ``tenant``, that tenant's tasks' alone."""
        return (await self.waiting_page(shards, limit, tenant)).questions

    async def waiting_page(
        self,
        shards: Iterable[tuple[str, int]],
        limit: int = 100,
        tenant: str | None = None,
        *,
        after: WaitingCursor | None = None,
        newest: bool = False,
    ) -> WaitingPage:
        """One page of the open questions over the given (agent, shard)s, oldest (or
        newest) first, starting after ``after``; with ``tenant``, that tenant's alone."""
        # The ids and ages of every shard's first, then the questions of the first ``limit``
        # of them all only: each shard's would be read in full, then most thrown. One more
        # than the page tells whether another page follows.
        found: list[tuple[float, str, ShardKeys]] = []
        for agent, shard in shards:
            keys = self.keys.shard(agent, shard)
            ids = await self.bus.waiting_ids(keys, limit + 1, tenant, after=after, newest=newest)
            found += [(asked, t, keys) for t, asked in ids]
        found.sort(key=lambda f: (f[0], f[1]), reverse=newest)
        page = found[:limit]
        by_shard: dict[ShardKeys, list[tuple[str, float]]] = {}
        for asked, task_id, keys in page:
            by_shard.setdefault(keys, []).append((task_id, asked))
        out: list[Waiting] = []
        for keys, ids in by_shard.items():
            out += await self.bus.waiting_of(keys, ids)
        out.sort(key=lambda w: (w.asked_ms, w.task_id), reverse=newest)
        # The next page starts after the last id listed, not the last question shown: one
        # that ended between the two reads is not listed again.
        last = WaitingCursor(int(page[-1][0]), page[-1][1]) if len(found) > limit else None
        first = WaitingCursor(int(page[0][0]), page[0][1]) if page else None
        return WaitingPage(out, last, first)

    async def waiting_total(self, shards: Iterable[tuple[str, int]], tenant: str) -> int:
        """How many questions the tenant's waiting index holds over the given shards."""
        keys = [self.keys.shard(agent, shard) for agent, shard in shards]
        return sum(await self.bus.waiting_count(keys, tenant))


@dataclass(frozen=True, slots=True)
class WaitingPage:
    """A page of open questions; where the next starts (None: the last page); the first
    listed (a page before this one ends there)."""

    questions: list[Waiting]
    next: WaitingCursor | None
    first: WaitingCursor | None = None


def _validate(answer: Any, schema_json: str) -> None:
    """Raise ``InvalidReply`` naming the first field (JSON path) that breaks the schema."""
    schema = answer_schema(schema_json)
    try:
        bad = first_error(answer, schema)
    except UnsafePattern as exc:  # stored before the check at ask, or damaged
        raise InvalidReply("answer", f"the question's schema cannot be checked: {exc}") from None
    if bad is not None:
        raise InvalidReply(bad.field, bad.reason)
