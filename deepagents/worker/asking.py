"""``ctx.ask``: a running task asks a person a question and parks until someone answers.

Parking is an outcome of the delivery, like a retry: ``Outcomes.park`` runs the park script
(owner-checked on the shard's slot), which makes the task ``waiting``, acks and deletes its
entry and puts the wait's deadline in the delayed set, so the task holds no worker slot
while it waits. A reply (``Orchestrator.reply``) stores the answer in the task's steps hash
(``ask:<n>``) and re-enqueues the task; the new delivery runs the agent again, its
completed steps return their records, and this ``ask`` finds the answer and returns it.

Questions are named by their order in the run (``1``, ``2``, ...): a task asks its
questions in the same order on every delivery, as it runs its steps.

When the wait runs out (the delayed pump's wake script re-enqueues the task and counts the
timeout), ``on_timeout`` decides: ``fail`` ends the task ``reply_timeout``; ``default``
returns ``default``; ``escalate`` submits a task to the configured escalation intent
(carrying the question and this task's id) and waits once more, as long again, for a
reply from whoever handles it; if that wait runs out too, the task fails
``reply_timeout``. A task whose own deadline passes while it waits is answered
``deadline_exceeded`` by the delivery the wake makes (its deadline is already past).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from deepagents.contract.answer_schema import UnsafePattern, check_patterns
from deepagents.contract.event_sink import EventSink
from deepagents.contract.events import AuditEvent
from deepagents.contract.inbox import (
    InboxAction,
    InboxAnswer,
    actions_of,
    answer_of,
    envelope_schema,
)
from deepagents.contract.task import Task, utcnow
from deepagents.errors import (
    ConfigError,
    DeepAgentsError,
    ErrorCode,
    InvalidInput,
    ReplyTimeout,
    TransportError,
)
from deepagents.telemetry.metrics import Metrics
from deepagents.transport.base import HumanWaits, now_ms
from deepagents.transport.keys import ShardKeys

log = logging.getLogger("deepagents.worker")
# How long after submit a task's location and owner records live (the orchestrator's
# ``location_ttl_s`` at the default result TTL): a wait may not outlast them.
RECORDS_TTL_S = 86_400 + 7 * 86_400
M = TypeVar("M", bound=BaseModel)
POLICIES = ("fail", "default", "escalate")
# Submits one task (the escalation) and gives its id: the worker's process wires an
# orchestrator's submit.
Escalate = Callable[[Task], Awaitable[str]]
# Checks the children a parent awaits and sends again the ends a crash lost
# (``Delegations.sweep``): (shard, tiers, parent id, awaited child ids) -> how many.
Sweep = Callable[[ShardKeys, Sequence[str], str, Sequence[str]], Awaitable[int]]


class Parked(DeepAgentsError):
    """Raised by ``ask`` to end the run: the task waits for a reply. The runtime parks the
    task even if the agent catches this (the request is kept on the delivery)."""

    code = ErrorCode.ERROR


@dataclass(frozen=True, slots=True)
class AskRequest:
    name: str
    question: str
    schema_json: bytes
    on_timeout: str
    default_json: bytes
    due_ms: int
    escalated: bool = False


@dataclass(slots=True)
class Asking:
    """One delivery's questions: what ``ask`` needs, and the question it parks on."""

    bus: HumanWaits
    keys: ShardKeys
    task: Task
    escalate: Escalate | None
    escalation_intent: str | None
    records_ttl_s: int = RECORDS_TTL_S
    request: AskRequest | None = None
    asked: int = 0
    events: list[AuditEvent] = field(default_factory=list)

    async def ask(
        self,
        question: str,
        *,
        schema: type[M],
        timeout_s: float,
        on_timeout: str = "fail",
        default: M | None = None,
        actions: Sequence[InboxAction | str] | None = None,
        proposal: M | None = None,
    ) -> Any:
        """The answer (an ``M``), or with ``actions`` an ``InboxAnswer[M]``."""
        _check(question, timeout_s, on_timeout, default)
        inbox = None if actions is None else _inbox(schema, actions_of(actions), proposal)
        self.asked += 1
        name = str(self.asked)
        record = await self.bus.ask_record(self.keys, self.task.task_id, name)
        if record.answer_json is not None:
            if inbox is not None:
                return _inbox_answer(schema, record.answer_json, name, proposal)
            return _validated(schema, record.answer_json, name)
        if record.timeouts == 0:
            raise self._park(name, question, schema, timeout_s, on_timeout, default, inbox=inbox)
        if on_timeout == "default":
            assert default is not None  # _check
            return default if inbox is None else InboxAnswer(InboxAction.IGNORE, default)
        if on_timeout == "escalate" and record.timeouts == 1:
            await self._escalate(name, question, schema)
            raise self._park(
                name, question, schema, timeout_s, on_timeout, default, True, inbox=inbox
            )
        after = "after escalation " if on_timeout == "escalate" else ""
        raise ReplyTimeout(f"question {name} got no reply {after}within {timeout_s:g} s")

    def _park(
        self,
        name: str,
        question: str,
        schema: type[BaseModel],
        timeout_s: float,
        on_timeout: str,
        default: BaseModel | None,
        escalated: bool = False,
        *,
        inbox: dict[str, Any] | None = None,
    ) -> Parked:
        due = now_ms() + math.ceil(timeout_s * 1000)
        if self.task.deadline is not None:  # the task's own deadline ends the wait too
            due = min(due, int(self.task.deadline.timestamp() * 1000))
        kept_ms = int(self.task.created_at.timestamp() * 1000) + self.records_ttl_s * 1000
        if due > kept_ms:
            # The task's location and owner records (how a reply finds it) expire then.
            raise ConfigError(
                f"ask(timeout_s={timeout_s:g}) would wait past the time the task's records "
                f"are kept ({self.records_ttl_s} s after submit: DEEPAGENTS_RESULT_TTL_S + 7 "
                "days); ask for a shorter wait, or keep results longer"
            )
        self.request = AskRequest(
            name,
            question,
            orjson.dumps(inbox or _answer_schema(schema)),
            on_timeout,
            b"" if default is None else default.model_dump_json().encode(),
            due,
            escalated,
        )
        return Parked(f"task {self.task.task_id} waits for a reply to question {name}")

    async def _escalate(self, name: str, question: str, schema: type[BaseModel]) -> None:
        if self.escalate is None or not self.escalation_intent:
            raise ReplyTimeout(
                f"question {name} got no reply and cannot be escalated: no escalation intent "
                "is configured (asks.escalation_intent)"
            )
        task_id = self.task.task_id
        escalation = Task(
            intent=self.escalation_intent,
            payload={
                "task_id": task_id,
                "agent": self.keys.agent,
                "ask": name,
                "question": question,
                "schema": schema.model_json_schema(),
                "escalated_at": utcnow().isoformat(),
            },
            tenant=self.task.tenant,
            # A redelivery of this run submits the same task, not a second one.
            idempotency_key=f"escalation:{task_id}:{name}",
        )
        submitted = await self.escalate(escalation)
        self.events.append(
            AuditEvent.of(
                "escalated",
                task_id,
                agent=self.keys.agent,
                ask=name,
                intent=self.escalation_intent,
                escalation_task_id=submitted,
            )
        )


@dataclass(frozen=True, slots=True)
class Asks:
    """The worker's side of ``ask``: builds each delivery's ``Asking``."""

    bus: HumanWaits
    escalate: Escalate | None = None
    escalation_intent: str | None = None
    records_ttl_s: int = RECORDS_TTL_S

    def open(self, keys: ShardKeys, task: Task) -> Asking:
        asking = Asking(
            self.bus, keys, task, self.escalate, self.escalation_intent, self.records_ttl_s
        )
        return open_asking(asking)


async def wake_due(
    bus: HumanWaits,
    keys: ShardKeys,
    tiers: Sequence[str],
    waits: Sequence[str],
    *,
    events: EventSink,
    metrics: Metrics | None,
    sweep: Sweep | None = None,
) -> int:
    """The delayed pump found these waits due: re-enqueue each task whose wait ran out (its
    ``ask`` then applies the policy). A reply or cancel that came first leaves nothing to
    do (``gone``). A parent waiting for its children is not woken by its sweep interval:
    its children are checked (``sweep``). How many woke."""
    woke = 0
    for task_id in waits:
        expired = events.keep([AuditEvent.of("wait_expired", task_id, agent=keys.agent)])
        try:
            woken = await bus.wake(keys, tiers, task_id, expired)
        except TransportError as exc:
            if exc.retryable:  # the pump backs off and tries again
                raise
            # One task's damaged records (say a key of the wrong type) must not stop the
            # waits behind it; its member stays, and is tried again at the next turn.
            log.error("waking task %s failed: %s", task_id, exc, extra={"action": "wake_failed"})
            continue
        if woken.status == "sweep" and sweep is not None:
            try:
                await sweep(keys, tiers, task_id, woken.children)
            except TransportError as exc:  # the wait came back later: swept again then
                log.warning("sweeping task %s's children failed: %s", task_id, exc)
            continue
        if woken.status != "ok":
            continue
        woke += 1
        if metrics is not None and woken.asked_ms:
            waited = max(0.0, (now_ms() - woken.asked_ms) / 1000)
            metrics.human_wait.labels(keys.agent, "timeout").observe(waited)
    return woke


_current: ContextVar[Asking | None] = ContextVar("deepagents_asking", default=None)


def open_asking(asking: Asking) -> Asking:
    """The runtime's: ``asking`` serves the questions of the delivery running in this
    context (each delivery runs in a context of its own)."""
    _current.set(asking)
    return asking


def current_asking() -> Asking:
    asking = _current.get()
    if asking is None:
        raise ConfigError("ask() works inside a running task only")
    return asking


async def ask(
    question: str,
    *,
    schema: type[M],
    timeout_s: float,
    on_timeout: str = "fail",
    default: M | None = None,
    actions: Sequence[InboxAction | str] | None = None,
    proposal: M | None = None,
) -> Any:
    """Ask a person ``question`` from the running task (what ``ctx.ask`` does)."""
    return await current_asking().ask(
        question,
        schema=schema,
        timeout_s=timeout_s,
        on_timeout=on_timeout,
        default=default,
        actions=actions,
        proposal=proposal,
    )


def _check(question: str, timeout_s: float, on_timeout: str, default: BaseModel | None) -> None:
    if on_timeout not in POLICIES:
        raise ConfigError(f"on_timeout must be one of {', '.join(POLICIES)}, not {on_timeout!r}")
    if not (timeout_s > 0 and math.isfinite(timeout_s)):
        raise ConfigError(f"timeout_s must be a positive number of seconds, not {timeout_s!r}")
    if on_timeout == "default" and default is None:
        raise ConfigError('on_timeout="default" needs a default')
    if not question:
        raise ConfigError("ask() needs a question")


def _answer_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The question's JSON Schema; a pattern the reply check's engine (RE2, linear time)
    refuses is this ask's error, not the person's who answers."""
    schema = model.model_json_schema()
    try:
        check_patterns(schema, model.__name__)
    except UnsafePattern as exc:
        raise ConfigError(f"ask(schema={model.__name__}): {exc}") from None
    return schema


def _inbox(
    schema: type[BaseModel], actions: tuple[InboxAction, ...], proposal: BaseModel | None
) -> dict[str, Any]:
    """The envelope answer schema of a question with actions (contract/inbox.py)."""
    if proposal is None and (InboxAction.ACCEPT in actions or InboxAction.EDIT in actions):
        raise ConfigError("ask(actions=[accept or edit]) needs the proposal to accept or edit")
    if proposal is not None and not isinstance(proposal, schema):
        raise ConfigError(f"ask(proposal=...) must be a {schema.__name__}")
    shown = None if proposal is None else proposal.model_dump(mode="json")
    return envelope_schema(_answer_schema(schema), actions, shown)


def _inbox_answer(
    schema: type[M], answer_json: bytes, name: str, proposal: M | None
) -> InboxAnswer[M]:
    try:
        return answer_of(orjson.loads(answer_json), schema, proposal)
    except (ValueError, ValidationError) as exc:  # checked against the envelope at reply
        raise InvalidInput(f"the reply to question {name} does not fit: {exc}") from exc


def _validated(schema: type[M], answer_json: bytes, name: str) -> M:
    try:
        return schema.model_validate_json(answer_json)
    except ValidationError as exc:  # checked against the JSON Schema at reply: rare
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "answer"
        raise InvalidInput(
            f"the reply to question {name} does not fit: {where}: {first['msg']}"
        ) from exc
