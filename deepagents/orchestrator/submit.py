"""The submit path: validate, route and enqueue tasks (idempotent on ``task_id``), honour
idempotency keys, refuse with ``BacklogRefused`` when a stream's backlog is over its limit,
and start each task's PRODUCER span when a tracer records."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

import orjson
from opentelemetry.trace import Span, StatusCode
from prometheus_client import Counter
from pydantic import ValidationError
from pydantic_core import to_jsonable_python

from deepagents._internal.ids import uuid7_str
from deepagents.config.settings import Settings
from deepagents.contract.codec import encode_task
from deepagents.contract.event_sink import event_sink
from deepagents.contract.events import AuditEvent
from deepagents.contract.task import Task, utcnow
from deepagents.errors import (
    DeadlinePassed,
    IdempotencyConflict,
    InvalidPayload,
    NotBeforeTooFar,
    PayloadTooLarge,
    SubmitError,
    UnknownIntent,
)
from deepagents.orchestrator.coalesce import SubmitCoalescer
from deepagents.orchestrator.handle import BacklogRefused, ResultSource, TaskHandle
from deepagents.orchestrator.parts import PART_MIN, shard_parts
from deepagents.orchestrator.routing import Route, Router, Routes
from deepagents.orchestrator.unserved import Unserved
from deepagents.store.base import TaskRecords
from deepagents.store.tasks import IdempotencyClaim, Location
from deepagents.telemetry.core import Telemetry
from deepagents.telemetry.tracing import extract, producer_span, traceparent_of
from deepagents.transport.base import Admitted, Enqueue, Fairness, MessageBus
from deepagents.transport.states import Enqueued


class ResultReturn(ResultSource, Protocol):
    """Where the results of the tasks submitted come back: the reply channel their workers
    publish to, and what their handles wait through (the orchestrator)."""

    reply_channel: str


class Submitter:
    """Handles it gives out wait through ``results`` (the orchestrator)."""

    def __init__(
        self,
        routes: Routes,
        *,
        bus: MessageBus,
        tasks: TaskRecords,
        settings: Settings,
        telemetry: Telemetry,
        results: ResultReturn,
        unserved: Unserved,
    ) -> None:
        self.routes = routes
        self.bus, self.tasks, self.settings, self.telemetry = bus, tasks, settings, telemetry
        self.events = event_sink(settings.outbox)
        self.results = results
        self.unserved = unserved
        self._submitted: dict[tuple[str, str, str], Counter] = {}
        self._coalescer = SubmitCoalescer(self)

    @property
    def router(self) -> Router:
        return self.routes.router

    @property
    def tracing(self) -> bool:
        """Whether a tracer records (each task's span then starts in its caller's context)."""
        return self.telemetry.tracing.recording

    async def submit(
        self,
        task: Task | Mapping[str, Any],
        *,
        recorded: bool = False,
        delay: timedelta | None = None,
    ) -> TaskHandle:
        """Validate, route and enqueue one task. Raises a SubmitError; nothing is enqueued
        then. Concurrent calls share their round trips (``coalesce.py``), each with its own
        outcome. ``recorded``: the caller wrote the task's location record (``locations``).
        ``delay``: run it no earlier than that from now (sets ``not_before``; a task runs
        later with either, state ``scheduled`` until due)."""
        valid = _validated(task)
        if delay is not None:
            valid = valid.model_copy(update={"not_before": utcnow() + delay})
        return await self._warned(await self._coalescer.submit(valid, recorded=recorded))

    async def _warned(self, handle: TaskHandle) -> TaskHandle:
        """The handle, with a warning when no live worker serves its agent."""
        warning = await self.unserved.warning(handle.agent)
        return handle if warning is None else dataclasses.replace(handle, warning=warning)

    async def _all_warned(self, handles: list[TaskHandle]) -> list[TaskHandle]:
        """``_warned`` for a batch: asked once per agent type, not per task."""
        said = {agent: await self.unserved.warning(agent) for agent in {h.agent for h in handles}}
        if not any(said.values()):
            return handles
        return [
            dataclasses.replace(h, warning=said[h.agent]) if said[h.agent] else h for h in handles
        ]

    async def submit_many(
        self, tasks: Sequence[Task | Mapping[str, Any]], *, recorded: Collection[str] = ()
    ) -> list[TaskHandle]:
        """Validate all first (one bad task enqueues none), then enqueue in one round trip
        (a large batch over several shards: in parts side by side, ``parts.py``).
        When a tracer records, each task gets a PRODUCER span whose traceparent it carries.

        ``recorded``: task ids whose location keys the caller already wrote (see
        ``locations``), in a round trip it makes anyway; they are not written again."""
        if not self.telemetry.tracing.recording:
            return await self._all_warned(await self._submit_many(tasks, None, recorded))
        spans: list[Span] = []
        try:
            return await self._all_warned(await self._submit_many(tasks, spans, recorded))
        except Exception as exc:
            for span in spans:
                span.set_status(StatusCode.ERROR, type(exc).__name__)
            raise
        finally:
            for span in spans:
                span.end()

    def locations(self, tasks: Iterable[Task]) -> list[tuple[str, str]]:
        """(key, value) of the location record of each task that routes; a task that does
        not route is left out (``submit_many`` refuses it). Values and TTL (``location_ttl_s``)
        are what ``submit_many`` writes with the enqueue."""
        out = []
        for task in tasks:
            try:
                route = self.router.route(task)
            except (UnknownIntent, InvalidPayload):
                continue
            out.append(self.tasks.location_record(task.task_id, _location(route)))
        return out

    @property
    def location_ttl_s(self) -> int:
        # Outlives the result by a week, so a late lookup still finds where the task went.
        return self.settings.result_ttl_s + 7 * 86_400

    async def _submit_many(
        self,
        tasks: Sequence[Task | Mapping[str, Any]],
        spans: list[Span] | None,
        recorded: Collection[str] = (),
    ) -> list[TaskHandle]:
        prepared = [self._prepare(t, spans) for t in tasks]
        prepared, claimed = await self._apply_idempotency(prepared)
        try:
            handles = await self._enqueue_prepared(prepared, recorded)
        except SubmitError as exc:
            # Refused: what was refused was not enqueued, so its fresh claims go, and a
            # retry with the key makes the task anew. Any other error leaves them: the
            # enqueue may have landed, and a retry binds the key to that very task.
            kept = {h.task_id for h in exc.accepted} if isinstance(exc, BacklogRefused) else set()
            await self.tasks.release_idempotency([c for c in claimed if c.task_id not in kept])
            await self._record_owners([t for t, _, _, _ in prepared if t.task_id in kept], recorded)
            raise
        await self._record_owners([task for task, _, _, _ in prepared], recorded)
        return handles

    async def _record_owners(self, tasks: list[Task], recorded: Collection[str]) -> None:
        """A task that names its tenant belongs to that tenant, as one the gateway took from
        it does: the owner record lets the tenant's console, inbox and task API show it. The
        gateway writes its own with the admission (``recorded``); SET NX never moves a task
        from the owner it has (a child's, from its parent). Written after the enqueue: a
        crash in between leaves a task the tenant does not see, never a record of a task
        that was refused."""
        records = [
            self.tasks.owner_record(task.task_id, task.tenant)
            for task in tasks
            if task.tenant is not None and task.task_id not in recorded
        ]
        if records:
            await self.tasks.adopt(records, self.location_ttl_s)

    async def _enqueue_prepared(
        self, prepared: list[tuple[Task, Route, bytes, bool]], recorded: Collection[str]
    ) -> list[TaskHandle]:
        ts = utcnow().isoformat()  # one submit call, one time of submission
        parts = None
        # With replicas, one WAIT confirms the whole batch: it stays one round trip.
        if len(prepared) >= 2 * PART_MIN and not self.settings.min_replicas:
            parts = shard_parts([route.stream.keys.tag for _, route, _, _ in prepared])
        if parts is None or len(parts) == 1:
            replies = await self._enqueue(prepared, recorded, ts)
        else:
            replies = await self._enqueue_parts(prepared, parts, recorded, ts)
        handles: list[TaskHandle] = []
        refused = []
        counts: dict[tuple[str, str, str], int] = {}
        for (task, route, _, duplicate), (status, _) in zip(prepared, replies, strict=True):
            outcome = "overloaded" if status == "overloaded" else "accepted"
            if duplicate or status == "exists":
                outcome = "duplicate"
            key = (route.agent, route.tier, outcome)
            counts[key] = counts.get(key, 0) + 1
            if status == "overloaded":
                refused.append(route)
                continue
            handles.append(
                TaskHandle(
                    task.task_id,
                    route.agent,
                    route.tier,
                    route.shard,
                    # With a key, the SET NX decided who was first (the first submit's own
                    # enqueue may land after a duplicate's); without one, the task hash did.
                    duplicate if task.idempotency_key else status == "exists",
                    self.results,
                )
            )
        self._count_submits(counts)
        if refused:
            raise self.overloaded(refused[0], len(refused), handles)
        return handles

    async def _enqueue(
        self, prepared: list[tuple[Task, Route, bytes, bool]], recorded: Collection[str], ts: str
    ) -> list[Admitted]:
        """Enqueue validated tasks in one round trip: (status, entry id) per task; ``ts`` is
        the time of their ``submitted`` events."""
        reply = self.results.reply_channel
        if self.events.wanted:
            items = [
                Enqueue(
                    route.stream, task.task_id, task_json, reply, _submitted_events(task, route, ts)
                )
                for task, route, task_json, _ in prepared
            ]
        else:
            items = [
                Enqueue(route.stream, task.task_id, task_json, reply)
                for task, route, task_json, _ in prepared
            ]
        specs = self.router.specs
        return await self.bus.enqueue_many(
            items,
            max_backlog=[specs[r.agent].max_backlog for _, r, _, _ in prepared],
            locations=self._locations(prepared, recorded),
            location_ttl_s=self.location_ttl_s,
            due_ms=_due_ms([task for task, _, _, _ in prepared]),
            fair=self._fairness(prepared),
        )

    def _fairness(self, prepared: list[tuple[Task, Route, bytes, bool]]) -> list[Fairness | None]:
        """Each task's share of a fair tier (its key: its fairness key, else its tenant);
        none at all when no task goes to a fair tier (the common case costs nothing)."""
        tiers = self.routes.config.tiers
        if all(tiers[route.tier].fair_share is None for _, route, _, _ in prepared):
            return []
        return [
            Fairness(
                task.fairness_key or task.tenant or "",
                task.fairness_weight or 1.0,
                tiers[route.tier].max_running_per_key,
            )
            if tiers[route.tier].fair_share is not None
            else None
            for task, route, _, _ in prepared
        ]

    async def _enqueue_parts(
        self,
        prepared: list[tuple[Task, Route, bytes, bool]],
        parts: list[list[int]],
        recorded: Collection[str],
        ts: str,
    ) -> list[Admitted]:
        """Each part in a round trip of its own, side by side (``parts.py``). Every part has
        landed or failed before this returns; a failure is raised then, as one round trip's
        would be (the parts that landed stay enqueued: a retry finds them, by task id)."""
        outcomes = await asyncio.gather(
            *(self._enqueue([prepared[i] for i in part], recorded, ts) for part in parts),
            return_exceptions=True,
        )
        replies: list[Admitted] = [Admitted(Enqueued.OK, "")] * len(prepared)
        for part, outcome in zip(parts, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                raise outcome
            for i, reply in zip(part, outcome, strict=True):
                replies[i] = reply
        return replies

    def overloaded(self, route: Route, refused: int, accepted: list[TaskHandle]) -> BacklogRefused:
        """The refusal ``submit_many`` raises when ``refused`` tasks found ``route``'s stream
        over its backlog limit; ``accepted`` are the handles of the tasks that were enqueued."""
        return BacklogRefused(
            f"stream {route.stream.name} is over its backlog limit "
            f"({self.router.specs[route.agent].max_backlog}); {refused} task(s) refused",
            accepted=accepted,
            retry_after_s=1.0,
        )

    def _count_submits(self, counts: dict[tuple[str, str, str], int]) -> None:
        """Count a call's submits per (agent, tier, outcome): one ``inc`` each, not per task."""
        if self.telemetry.metrics is None:
            return
        for key, n in counts.items():
            child = self._submitted.get(key)
            if child is None:
                child = self._submitted[key] = self.telemetry.metrics.submitted.labels(*key)
            child.inc(n)

    def _traced(self, task: Task, route: Route, spans: list[Span]) -> Task:
        """Start the task's PRODUCER span (under the traceparent it came with, else the
        caller's current span) and carry the span's traceparent in the task."""
        span = producer_span(
            self.telemetry.tracing, route.agent, route.tier, extract(task.traceparent)
        )
        if span is None:
            return task
        spans.append(span)
        span.set_attribute("deepagents.task_id", task.task_id)
        return task.model_copy(update={"traceparent": traceparent_of(span)})

    def _prepare(
        self, raw: Task | Mapping[str, Any], spans: list[Span] | None = None
    ) -> tuple[Task, Route, bytes, bool]:
        task = _validated(raw)
        if task.deadline is not None and task.deadline <= utcnow():
            raise DeadlinePassed(f"deadline {task.deadline.isoformat()} is in the past")
        if task.not_before is not None:
            self._check_horizon(task.not_before)
        route = self.router.route(task)
        if spans is not None:
            task = self._traced(task, route, spans)
        task_json = encode_task(task)
        if len(task_json) > self.settings.max_payload_bytes:
            raise PayloadTooLarge(
                f"task is {len(task_json)} bytes encoded; the limit is "
                f"{self.settings.max_payload_bytes} (DEEPAGENTS_MAX_PAYLOAD_BYTES)"
            )
        return task, route, task_json, False

    def _check_horizon(self, not_before: datetime) -> None:
        ahead = (not_before - utcnow()).total_seconds()
        horizon = self.settings.max_schedule_ahead_s
        if ahead > horizon:
            raise NotBeforeTooFar(
                f"not_before {not_before.isoformat()} is {ahead:.0f} s ahead; the limit is "
                f"{horizon} s (DEEPAGENTS_MAX_SCHEDULE_AHEAD_S)"
            )

    async def _apply_idempotency(
        self, prepared: list[tuple[Task, Route, bytes, bool]]
    ) -> tuple[list[tuple[Task, Route, bytes, bool]], list[IdempotencyClaim]]:
        """Claim each idempotency key for its task (SET NX), or find the task that has it.
        A key holds ``<task id> <fingerprint>``: reusing it for a different task raises
        ``IdempotencyConflict`` and nothing of the batch is enqueued (the keys this call
        claimed are released). Returns the tasks and the claims this call made."""
        keyed = [i for i, (t, _, _, _) in enumerate(prepared) if t.idempotency_key]
        if not keyed:
            return prepared, []
        prints = [_fingerprint(prepared[i][0]) for i in keyed]
        claims = [
            IdempotencyClaim(t.idempotency_key or "", t.tenant, t.task_id, mine)
            for t, mine in zip((prepared[i][0] for i in keyed), prints, strict=True)
        ]
        holders = await self.tasks.claim_idempotency(claims, self.settings.idempotency_ttl_s)
        out = list(prepared)
        mine_claimed = [
            c for c, h in zip(claims, holders, strict=True) if h is None or h[0] == c.task_id
        ]
        for i, mine, holder in zip(keyed, prints, holders, strict=True):
            task = prepared[i][0]
            if holder is None or holder[0] == task.task_id:  # ours (None: expired meanwhile)
                continue
            owner, fingerprint = holder
            # Keys written before fingerprints existed hold the task id alone: no check.
            if fingerprint and fingerprint != mine:
                await self.tasks.release_idempotency(mine_claimed)
                raise IdempotencyConflict(
                    f"idempotency key {task.idempotency_key!r} belongs to task {owner}, "
                    "submitted with a different intent, payload or priority; resend that "
                    "task unchanged, or use a new key for a new task",
                    task_id=owner,
                )
            # An earlier submit won: enqueue under its task id. If that submit got as far
            # as enqueueing, the enqueue script sees the task and adds nothing.
            first = task.model_copy(update={"task_id": owner})
            out[i] = (first, self.router.route(first), encode_task(first), True)
        return out, mine_claimed

    def _locations(
        self, prepared: list[tuple[Task, Route, bytes, bool]], recorded: Collection[str]
    ) -> list[tuple[str, str]]:
        """The location record of every task, written with the enqueue (``enqueue_many``);
        none when the caller wrote them all. A batch mixing both writes them all again:
        the same value and TTL, so no harm."""
        if recorded and all(task.task_id in recorded for task, _, _, _ in prepared):
            return []
        return [
            self.tasks.location_record(task.task_id, _location(route))
            for task, route, _, _ in prepared
        ]


def _validated(raw: Task | Mapping[str, Any]) -> Task:
    if isinstance(raw, Task):
        return raw
    try:
        return Task.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "task"
        raise InvalidPayload(f"invalid task: {where}: {first['msg']}") from exc


def _due_ms(tasks: list[Task]) -> list[int]:
    """When each task is due (ms since the epoch), 0 for now; none at all when no task has
    a ``not_before`` still ahead (the common case costs nothing)."""
    now = utcnow()
    if all(t.not_before is None or t.not_before <= now for t in tasks):
        return []
    return [
        int(t.not_before.timestamp() * 1000) if t.not_before and t.not_before > now else 0
        for t in tasks
    ]


def _location(route: Route) -> Location:
    return Location(route.agent, route.shard, route.tier)


def _submitted_events(task: Task, route: Route, ts: str) -> tuple[AuditEvent]:
    """The task's ``submitted`` audit event (``ts`` is the submit call's time)."""
    fields: dict[str, Any] = {
        "agent": route.agent,
        "tier": route.tier,
        "shard": route.shard,
        "intent": task.intent,
    }
    if task.tenant is not None:
        fields["tenant"] = task.tenant
    if task.traceparent is not None:
        fields["traceparent"] = task.traceparent
    if task.parent_id is not None:  # a child task: its audit trail names its parent
        fields["parent_id"] = task.parent_id
    fields["payload"] = task.payload
    return (AuditEvent("submitted", task.task_id, ts, fields, uuid7_str()),)


def _fingerprint(task: Task) -> str:
    """What makes two submits the same task. Not the deadline, ``created_at`` or trace
    context: a client retrying computes those afresh."""
    body = orjson.dumps(
        [task.intent, task.payload, task.priority],
        default=to_jsonable_python,
        option=orjson.OPT_SORT_KEYS,
    )
    return hashlib.sha256(body).hexdigest()[:32]
