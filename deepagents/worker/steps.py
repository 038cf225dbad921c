"""The worker's ``TaskContext`` (``contract/context.py``): durable steps of one delivery.

Every record is one owner-checked script (``StepLog.record_steps``), as a commit is; the
records of every delivery in flight share round trips (``_internal/group_commit.py``). A
worker that lost its entry writes nothing, is told so, and stops the delivery as the
heartbeat would. The in-flight rule (docs/design.md, "Durable steps"): a step counts as
done once its record landed; a step whose fn finished but whose record had not landed when
the worker died runs again on the next delivery.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from contextvars import ContextVar
from typing import Any, TypeVar, overload

import orjson
from opentelemetry.trace import Tracer
from pydantic import BaseModel

from deepagents._internal.group_commit import GroupCommit
from deepagents.contract.context import Delegation, M, OnTimeout, PhaseScope, TaskContext
from deepagents.contract.events import AuditEvent
from deepagents.contract.inbox import InboxAction, InboxAnswer
from deepagents.contract.result import Result
from deepagents.errors import StepError
from deepagents.modelcall.usage import UsageLedger, current_usage, usage_scope
from deepagents.store.claims import ClaimStore
from deepagents.telemetry.metrics import StepMetrics
from deepagents.transport.base import StepLog, StepRecord, StreamRef
from deepagents.worker.asking import current_asking
from deepagents.worker.delegation import current_delegating
from deepagents.worker.delivery_kit import DeliveryKit
from deepagents.worker.flight import InFlight
from deepagents.worker.step_ids import Branch, check_name, current_branch
from deepagents.worker.step_records import RecordCodec, encode_json
from deepagents.worker.step_state import STATE, VERSION, encode_state, fresh_state, restore_state

log = logging.getLogger("deepagents.worker")
T = TypeVar("T")
STEP = "step:"
# A step's model usage (tokens, cost, degraded), recorded with it: a later delivery that
# replays the step counts it in the task's Result, as if the step had run there.
USAGE = "usage:"
_PHASE = re.compile(r"^[a-z][a-z0-9_.-]{0,39}$")
_step_key: ContextVar[str | None] = ContextVar("deepagents_step_key", default=None)
# Large bodies in the database outlive their Redis records by this much at least, so a
# task that runs for days still finds its claim checks.
CLAIM_MARGIN_S = 7 * 86_400


class StepBook:
    """One per worker: opens the ``TaskContext`` of each delivery."""

    def __init__(
        self,
        kit: DeliveryKit,
        *,
        executor: Executor | None,
        claims: ClaimStore | None,
        tracer: Tracer | None = None,
    ) -> None:
        self.tracer = tracer  # a span per step when tracing records
        bus, group, consumer, agent = kit.bus, kit.group, kit.consumer, kit.agent
        agent_settings = kit.agent_settings
        self.bus: StepLog = bus
        self.group, self.consumer, self.agent = group, consumer, agent
        self.encoder, self.executor, self.stats = kit.encoder, executor, kit.stats
        self.metrics: StepMetrics | None = kit.metrics.steps if kit.metrics is not None else None
        self.events = kit.events
        self.max_state_bytes = agent_settings.max_state_bytes
        self.codec = RecordCodec(
            claims,
            agent_settings.step_inline_bytes,
            kit.settings.result_ttl_s + CLAIM_MARGIN_S,
        )
        self.refused = 0  # records refused because another consumer owned the entry
        # Its state is restored (and migrated) as each delivery starts: ``DeliverySteps.start``
        self.restores = agent.state_model is not None
        self.writer = step_records(bus, group, consumer)

    def open(self, flight: InFlight, lose: Callable[[InFlight], bool]) -> DeliverySteps:
        return DeliverySteps(self, flight, lose)


def step_records(
    bus: StepLog, group: str, consumer: str
) -> GroupCommit[tuple[StreamRef, StepRecord], str]:
    """The records of every delivery in flight, sent together: the same turn's records share
    a batch, and those asked for while it is on the wire the next. Sent from the group's own
    task, so a step cancelled meanwhile never cancels the round trip: its record lands."""
    return GroupCommit(
        functools.partial(bus.record_steps, group, consumer),
        name="step-records",
        from_caller=False,
    )


class _Phase(PhaseScope):
    __slots__ = ("_ctx", "_previous")

    def __init__(self, ctx: DeliverySteps, previous: str) -> None:
        self._ctx, self._previous = ctx, previous

    def __exit__(self, *exc: object) -> None:
        self._ctx.current_phase = self._previous


class DeliverySteps(TaskContext):
    """The durable context of one delivery. Its records are loaded once, on first need (at
    the start, for an agent with a ``state_model``: its state must be restored first)."""

    # One per delivery of every agent, stepped or not: kept small, and its branch made on use.
    __slots__ = (
        "_book",
        "_flight",
        "_loading",
        "_lose",
        "_pending",
        "_records",
        "_resumed",
        "_root",
        "_state",
        "completed",
        "current_phase",
        "replayed",
    )  # fmt: skip

    def __init__(self, book: StepBook, flight: InFlight, lose: Callable[[InFlight], bool]) -> None:
        self._book, self._flight, self._lose = book, flight, lose
        self._root: Branch | None = None
        self._records: dict[str, bytes] | None = None
        self._loading: asyncio.Future[dict[str, bytes]] | None = None
        self._state: BaseModel | None = None
        self._pending: list[AuditEvent] = []  # audit events to send with the next write
        self._resumed = False
        self.current_phase = "main"
        self.completed = self.replayed = 0

    # what the agent reads ------------------------------------------------------------------

    @property
    def task_id(self) -> str:
        return self._flight.envelope.task.task_id

    @property
    def step_key(self) -> str:
        key = _step_key.get()
        if key is None:
            raise StepError("ctx.step_key is the running step's: read it inside a step's fn")
        return key

    @property
    def resumed(self) -> bool:
        return self._resumed

    @property
    def state(self) -> Any:
        if self._state is None:
            if self._book.agent.state_model is None:
                raise StepError(f"{self._book.agent.name} declares no state_model")
            raise StepError("ctx.state is restored when the delivery starts; none was here")
        return self._state

    def phase(self, name: str) -> PhaseScope:
        if not isinstance(name, str) or not _PHASE.match(name):
            raise StepError(f"a phase is a short label ([a-z][a-z0-9_.-]*, 40 at most): {name!r}")
        scope = _Phase(self, self.current_phase)
        self.current_phase = name
        return scope

    # steps ---------------------------------------------------------------------------------

    async def step(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        if _step_key.get() is not None:
            # Replayed, the outer step would not call it: the ids after it would shift.
            raise StepError(f"step {name!r} inside the fn of step {_step_key.get()!r}: "
                            "steps do not nest (make them siblings, or use gather)")  # fmt: skip
        branch = current_branch.get() or self._root_branch()
        step_id = branch.next_id(check_name(name))
        records = await self.records()
        recorded = records.get(STEP + step_id)
        book = self._book
        if book.tracer is not None:
            with book.tracer.start_as_current_span(
                f"step {name}",
                attributes={
                    "deepagents.step.id": step_id,
                    "deepagents.step.phase": self.current_phase,
                    "deepagents.step.replayed": recorded is not None,
                    "deepagents.agent": book.agent.name,
                },
            ):
                return await self._run_step(step_id, fn, args, records, recorded)
        return await self._run_step(step_id, fn, args, records, recorded)

    async def _run_step(
        self,
        step_id: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        records: dict[str, bytes],
        recorded: bytes | None,
    ) -> Any:
        book = self._book
        if recorded is not None:
            self.replayed += 1
            if book.metrics is not None:
                book.metrics.bound(book.agent.name, self.current_phase).replayed.inc()
            _carry(records.get(USAGE + step_id))
            return orjson.loads(await book.codec.body(f"step {step_id!r}", recorded))
        started = time.monotonic()
        parent = current_usage()
        with usage_scope() as usage:
            token = _step_key.set(f"{self.task_id}/{step_id}")
            try:
                value = await self._call(fn, args)
            finally:
                _step_key.reset(token)
                if parent is not None and usage.attempts:  # the task's totals include it
                    parent.add_ledger(usage)
        body = encode_json(f"step {step_id!r}'s result", value)
        await self._record_step(step_id, body, started, usage)
        if parent is not None and usage.attempts:  # a later delivery replays it
            parent.recorded(usage)
        records[STEP + step_id] = body
        return orjson.loads(body)  # as a later delivery will see it: the JSON, decoded

    def _root_branch(self) -> Branch:
        if self._root is None:
            self._root = Branch()
        return self._root

    async def _call(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        if inspect.iscoroutinefunction(fn):
            return await fn(*args)
        executor = self._book.executor
        loop = asyncio.get_running_loop()
        call = functools.partial(contextvars.copy_context().run, fn, *args)
        value = await loop.run_in_executor(executor, call)
        if inspect.isawaitable(value):
            value = await value
        return value

    async def _record_step(
        self, step_id: str, body: bytes, started: float, usage: UsageLedger
    ) -> None:
        book = self._book
        value = await book.codec.field_value(f"step {step_id!r}'s result", self.task_id, body)
        elapsed = time.monotonic() - started
        event = None
        if book.events.wanted:
            fields: dict[str, Any] = {
                "step": step_id,
                "phase": self.current_phase,
                "latency_ms": round(elapsed * 1000, 3),
                "bytes": len(body),
            }
            if value is not body:
                fields["claim_check"] = True
            if usage.attempts:
                fields.update(tokens_used=usage.tokens_used, cost_usd=usage.cost_usd)
            event = book.encoder.event("step_completed", self._flight, **fields)
        written = [(STEP + step_id, value)]
        if usage.attempts:
            used = [usage.tokens_used, usage.cost_usd, usage.degraded]
            written.append((USAGE + step_id, orjson.dumps(used)))
        await self._write(written, event)
        self.completed += 1
        if book.metrics is not None:
            children = book.metrics.bound(book.agent.name, self.current_phase)
            children.completed.inc()
            children.duration.observe(elapsed)

    async def gather(self, *aws: Awaitable[Any]) -> list[Any]:
        parent = current_branch.get() or self._root_branch()
        branches = parent.fork(len(aws))
        tasks = []
        for branch, aw in zip(branches, aws, strict=True):
            context = contextvars.copy_context()
            context.run(current_branch.set, branch)
            tasks.append(asyncio.create_task(_awaited(aw), context=context))
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    # state ---------------------------------------------------------------------------------

    async def checkpoint(self) -> None:
        book = self._book
        body = encode_state(book.agent, self.state, book.max_state_bytes)
        value = await book.codec.field_value("the checkpoint", self.task_id, body)
        await self._write([(STATE, value), (VERSION, book.agent.version.encode())])
        if book.metrics is not None:
            book.metrics.checkpoint_bytes.labels(book.agent.name).observe(len(body))

    @overload
    async def ask(
        self,
        question: str,
        *,
        schema: type[M],
        timeout_s: float,
        on_timeout: OnTimeout = "fail",
        default: M | None = None,
    ) -> M: ...

    @overload
    async def ask(
        self,
        question: str,
        *,
        schema: type[M],
        timeout_s: float,
        on_timeout: OnTimeout = "fail",
        default: M | None = None,
        actions: Sequence[InboxAction | str],
        proposal: M | None = None,
    ) -> InboxAnswer[M]: ...

    async def ask(
        self,
        question: str,
        *,
        schema: type[M],
        timeout_s: float,
        on_timeout: OnTimeout = "fail",
        default: M | None = None,
        actions: Sequence[InboxAction | str] | None = None,
        proposal: M | None = None,
    ) -> M | InboxAnswer[M]:
        # The delivery's questions (worker/asking.py): parks the task until a reply.
        answer: M | InboxAnswer[M] = await current_asking().ask(
            question,
            schema=schema,
            timeout_s=timeout_s,
            on_timeout=on_timeout,
            default=default,
            actions=actions,
            proposal=proposal,
        )
        return answer

    async def delegate_many(
        self, calls: Sequence[Delegation], *, limit: int | None = None
    ) -> list[Result]:
        # One step id per child, counted in the branch as steps are: a later run derives the
        # same child ids (worker/delegation.py) and finds their recorded results.
        if _step_key.get() is not None:
            raise StepError("delegate inside a step's fn: delegate from the task's own code")
        branch = current_branch.get() or self._root_branch()
        step_ids = [branch.next_id("delegate") for _ in calls]
        return await current_delegating().delegate_many(step_ids, calls, limit)

    # records -------------------------------------------------------------------------------

    async def load_records(self, kind: str) -> dict[str, bytes]:
        prefix = _record_prefix(kind)
        cut = len(prefix)
        records = await self.records()
        return {name[cut:]: value for name, value in records.items() if name.startswith(prefix)}

    async def save_records(self, kind: str, fields: Sequence[tuple[str, bytes]]) -> None:
        prefix = _record_prefix(kind)
        named = [(prefix + name, value) for name, value in fields]
        records = await self.records()
        await self._write(named)
        records.update(named)

    @property
    def restores(self) -> bool:
        return self._book.restores

    async def start(self) -> None:
        """At the start of the delivery (when ``restores``): an agent with a state model gets
        its state, a checkpoint of another version migrated, before its code runs."""
        await self.records()

    async def records(self) -> dict[str, bytes]:
        if self._records is not None:
            return self._records
        if not self._flight.stepped:  # no delivery recorded anything: nothing to read
            if self._book.agent.state_model is not None:
                self._state = fresh_state(self._book.agent)
            self._records = {}
            return self._records
        if self._loading is None:  # branches asking at once share one read
            self._loading = asyncio.ensure_future(self._load())
        return await asyncio.shield(self._loading)

    async def _load(self) -> dict[str, bytes]:
        book, flight = self._book, self._flight
        records = await book.bus.load_steps(flight.stream.keys, self.task_id)
        if book.agent.state_model is not None:
            stored = records.get(STATE)
            if stored is None:
                self._state = fresh_state(book.agent)
            else:
                body = await book.codec.body("the checkpoint", stored)
                version = records.get(VERSION, b"").decode()
                self._state = restore_state(book.agent, body, version)
        done = sum(1 for name in records if name.startswith(STEP))
        if done or STATE in records:
            self._resumed = True
            if book.metrics is not None:
                book.metrics.resumes.labels(book.agent.name).inc()
            if book.events.wanted:
                self._pending.append(book.encoder.event("resumed", flight, steps=done))
        self._records = records
        return records

    async def _write(
        self, fields: list[tuple[str, bytes]], event: AuditEvent | None = None
    ) -> None:
        """Record ``fields`` with the pending audit events and ``event``."""
        book, flight = self._book, self._flight
        events, self._pending = self._pending, []
        if event is not None:
            events.append(event)
        item = StepRecord(flight.entry_id, self.task_id, fields, events)
        status = await book.writer((flight.stream, item))
        if status == "ok":
            return
        book.refused += 1
        book.stats.lost_ownership += 1
        if book.metrics is not None:
            book.metrics.refused.labels(book.agent.name).inc()
        log.warning(
            "step record of task %s refused (%s): another consumer owns its entry now",
            self.task_id,
            status,
            extra={"action": "step_refused", "task_id": self.task_id},
        )
        self._lose(flight)
        raise asyncio.CancelledError(f"task {self.task_id}: the entry is another consumer's")

    def leftover_events(self) -> list[AuditEvent]:
        """Audit events no write carried (a resumed delivery that recorded nothing more)."""
        events, self._pending = self._pending, []
        return events


def _record_prefix(kind: str) -> str:
    """An adapter's records live under ``rec:<kind>:``, apart from steps and state."""
    if not isinstance(kind, str) or not _PHASE.match(kind):
        raise StepError(f"a record kind is a short label ([a-z][a-z0-9_.-]*): {kind!r}")
    return f"rec:{kind}:"


def _carry(recorded: bytes | None) -> None:
    """Count a replayed step's recorded usage in the delivery's ledger. Records written
    before usage was kept, or damaged ones, count nothing (as before)."""
    ledger = current_usage()
    if recorded is None or ledger is None:
        return
    try:
        tokens, cost, degraded = orjson.loads(recorded)
        ledger.carry(int(tokens), float(cost), bool(degraded))
    except (orjson.JSONDecodeError, TypeError, ValueError):
        log.warning("a step's usage record is damaged; not counted", extra={"action": "usage"})


async def _awaited(aw: Awaitable[T]) -> T:
    return await aw
