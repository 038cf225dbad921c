"""Replies to tasks waiting on a person (``Orchestrator.reply``), and the open questions.

A reply is validated against the JSON Schema the task stored with its question, then
applied by one script on the task's shard slot (``answer.lua``): it checks that the task
waits for this very question, stores the answer and re-enqueues the task on its tier. A
second reply, or one racing the wait's timeout or a cancel, changes nothing and is told why.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from deepagents.contract.events import audit_event, encode_events
from deepagents.errors import (
    AlreadyReplied,
    InvalidReply,
    NotWaiting,
    PayloadTooLarge,
    ReplyTaskNotFound,
)
from deepagents.store.base import TaskRecords
from deepagents.telemetry.metrics import Metrics
from deepagents.transport.base import MessageBus, Waiting, now_ms
from deepagents.transport.keys import Keys


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
        schema = orjson.loads(info.get("ask_schema") or "{}")
    except orjson.JSONDecodeError:
        schema = {}
    return Question(
        ask=str(info.get("ask", "")),
        question=str(info.get("question", "")),
        schema=schema if isinstance(schema, dict) else {},
        asked_ms=int(info.get("asked_ms") or 0),
        due_ms=int(info.get("wait_due_ms") or 0),
        on_timeout=str(info.get("on_timeout", "")),
    )


class Replies:
    def __init__(
        self,
        bus: MessageBus,
        tasks: TaskRecords,
        keys: Keys,
        *,
        outbox: bool,
        metrics: Metrics | None,
        max_answer_bytes: int,
    ) -> None:
        self.bus, self.tasks, self.keys = bus, tasks, keys
        self.outbox, self.metrics, self.max_answer_bytes = outbox, metrics, max_answer_bytes

    async def reply(self, task_id: str, answer: Any, tiers: Sequence[str]) -> Replied:
        loc = await self.tasks.location(task_id, what="reply")
        info = {} if loc is None else await self.tasks.task_fields(loc, task_id)
        if loc is None or not info:
            raise ReplyTaskNotFound(f"no task {task_id}")
        ask = info.get("ask", "")
        # Under a rollout the task resumes on the streams of the version it was parked from
        # (where its wait's member is); the location names only agent, shard and tier.
        keys = self.keys.shard(loc.agent, loc.shard, info.get("lane", ""))
        if info.get("state") == "waiting":  # else the script says why it cannot take it
            asked = await self.bus.asked(keys, task_id)
            _validate(answer, asked.get("ask_schema") or "{}")
        answer_json = orjson.dumps(answer)
        if len(answer_json) > self.max_answer_bytes:
            raise PayloadTooLarge(
                f"the answer is {len(answer_json)} bytes; the limit is {self.max_answer_bytes}"
            )
        events = (
            [
                audit_event(
                    "replied", task_id, agent=loc.agent, ask=ask, asked_ms=info.get("asked_ms")
                )
            ]
            if self.outbox
            else []
        )
        done = await self.bus.answer(keys, tiers, task_id, ask, answer_json, encode_events(events))
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
        out: list[Waiting] = []
        for agent, shard in shards:
            out += await self.bus.waiting(self.keys.shard(agent, shard), limit, tenant)
        out.sort(key=lambda w: (w.asked_ms, w.task_id))
        return out[:limit]


def _validate(answer: Any, schema_json: str) -> None:
    """Raise ``InvalidReply`` naming the first field (JSON path) that breaks the schema."""
    # Imported on the first reply: a worker (which submits through an orchestrator) and the
    # CLI start without the validator's schema machinery.
    import jsonschema
    from jsonschema.exceptions import best_match

    try:
        schema = orjson.loads(schema_json)
    except orjson.JSONDecodeError:
        schema = {}
    validator_cls = jsonschema.validators.validator_for(
        schema, default=jsonschema.Draft202012Validator
    )
    error = best_match(validator_cls(schema).iter_errors(answer))
    if error is None:
        return
    path = list(error.absolute_path)
    if error.validator == "required" and isinstance(error.validator_value, list):
        # A missing property is named by itself, not by the object that lacks it.
        missing = [
            p
            for p in error.validator_value
            if isinstance(error.instance, dict) and p not in error.instance
        ]
        path += missing[:1]
    field = ".".join(str(p) for p in path) or "answer"
    raise InvalidReply(field, error.message)
