"""One delivery through the effectively-once protocol: decode, begin, run, commit.

Every way out of a delivery ends in exactly one owner-checked script: commit (result),
reschedule (retry or degrade), or dead-letter. Nothing is dropped silently.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import orjson
from pydantic_core import to_jsonable_python

from deepagents._internal.eager import Resume, first_step
from deepagents._internal.ids import uuid7_str
from deepagents.config.schema import AgentSettings, FileConfig
from deepagents.config.settings import Settings
from deepagents.contract.agent import AgentContract, current_attempt
from deepagents.contract.codec import (
    Envelope,
    decode_envelopes,
    encode_result,
    encode_task,
    salvage_ids,
)
from deepagents.contract.events import audit_event, encode_events
from deepagents.contract.result import NO_METRICS, ErrorCode, ErrorInfo, Result, ResultStatus
from deepagents.contract.task import utcnow
from deepagents.errors import TransportError
from deepagents.modelcall.usage import start_usage
from deepagents.telemetry.core import Telemetry
from deepagents.telemetry.metrics import TierMetrics
from deepagents.transport.base import (
    BeginItem,
    CommitItem,
    DeadLetter,
    MessageBus,
    RawEntry,
    Reschedule,
    StreamRef,
    now_ms,
)
from deepagents.worker.committer import Committer
from deepagents.worker.pools import TierPool
from deepagents.worker.quarantine import Quarantine
from deepagents.worker.retry import decide
from deepagents.worker.runner import AgentRunner
from deepagents.worker.stats import WorkerStats

log = logging.getLogger("deepagents.worker")
# A status's text without the enum's ``value`` descriptor, which is per task here.
_STATUS_TEXT = {status: status.value for status in ResultStatus}
_BODY_GONE = "the entry's body was deleted before it was processed"


@dataclass(slots=True)
class InFlight:
    stream: StreamRef
    entry_id: str
    envelope: Envelope
    deliveries: int
    # The asyncio task that runs it, shared with the deliveries of its batch until it
    # starts (``_run_in_turn``): cancel it only once ``started``.
    task: asyncio.Task[None] | None = None
    started: bool = False
    started_at: datetime = field(default_factory=utcnow)
    lost: bool = False
    committing: bool = False
    # Handed to the group commit: its slot is free, and it stays in flight (heartbeats
    # keep its entry) until the commit lands.
    handed: bool = False
    # The fields its audit events share, as encoded JSON members (``_event_context``),
    # when the outbox is on.
    context: bytes | None = None
    # Enqueue to begin: the wait its started event and its Result report.
    queue_ms: int = 0
    # A suspect's, run with no other delivery beside it (``quarantine.py``): set when the
    # delivery is over. An ordinary delivery (None) leaves the quarantine then instead.
    settled: asyncio.Event | None = None


class WorkerView(Protocol):
    """What the delivery steps read and change of their worker (``worker.Worker``)."""

    name: str
    agent: AgentContract
    agent_settings: AgentSettings
    config: FileConfig
    settings: Settings
    telemetry: Telemetry
    consumer: str
    bus: MessageBus
    pools: dict[str, TierPool]
    inflight: dict[tuple[str, str], InFlight]
    stats: WorkerStats


class DeliveryHandler:
    def __init__(self, worker: WorkerView, runner: AgentRunner) -> None:
        self.w = worker
        self.runner = runner
        self.committer = Committer(
            worker.bus,
            worker.name,
            worker.consumer,
            self.committed,
            worker.agent_settings.batch_size * 2,
            tier_rank={name: i for i, name in enumerate(worker.config.tier_names)},
            # A tier's readers read on while up to a poolful of its commits are in the
            # air: the agent's slots never wait for Redis to write results.
            backlog={name: pool.capacity for name, pool in worker.pools.items()},
        )
        self.group = worker.name
        self.outbox = worker.settings.outbox
        self.quarantine = Quarantine()
        self._bases: dict[str, bytes] = {}  # per stream name: a str hashes in C
        self._max_wait = {name: tier.max_wait_ms for name, tier in worker.config.tiers.items()}
        # What a producer may enqueue (Orchestrator.submit) is what a worker parses: a task
        # written past it straight to the stream is dead-lettered unread.
        self._max_task_bytes = worker.settings.max_payload_bytes
        metrics = worker.telemetry.metrics
        # Children bound once per tier: the hot path does a dict lookup, never a label lookup.
        self._tm: dict[str, TierMetrics] | None = (
            {t: metrics.tier(worker.name, t) for t in worker.config.tier_names}
            if metrics is not None
            else None
        )
        self._decode_errors = (
            metrics.decode_errors.labels(worker.name, "stream") if metrics is not None else None
        )

    # intake -------------------------------------------------------------------------------

    async def dispatch(
        self, ref: StreamRef, entries: list[RawEntry], *, fresh: bool = False
    ) -> None:
        """Start every entry of a batch; each holds one slot of its tier's pool until it
        hands its commit over (or is done otherwise). ``fresh``: new entries just read by
        this consumer (begin skips their owner check)."""
        pool = self.w.pools[ref.tier]
        good: list[tuple[RawEntry, Envelope]] = []
        decoded = decode_envelopes([entry.fields for entry in entries], self._max_task_bytes)
        for entry, envelope in zip(entries, decoded, strict=True):
            if isinstance(envelope, Envelope):
                good.append((entry, envelope))
                continue
            if entry.fields:
                # decode_error, or too_large for a task never parsed (TooLarge)
                await self._dead_letter_raw(ref, entry, envelope.code, str(envelope))
            else:
                await self._dead_letter_raw(ref, entry, ErrorCode.PAYLOAD_LOST, _BODY_GONE)
            pool.release()
        if not good:
            return
        if not fresh:  # recovered entries (a restart's own, or reclaimed): any suspects?
            try:
                suspects = await self._suspects(ref, good)
            except TransportError as exc:
                pool.release(len(good))  # still pending here: read again or reclaimed
                log.warning("reading delivery counts failed: %s", exc,
                            extra={"action": "begin_failed"})  # fmt: skip
                return
            if any(suspects):
                ordinary = [g for g, suspect in zip(good, suspects, strict=True) if not suspect]
                await self._start(ref, ordinary, pool, fresh)
                for g, suspect in zip(good, suspects, strict=True):
                    if suspect:
                        await self._run_alone(ref, g, pool)
                return
        await self._start(ref, good, pool, fresh)

    async def _suspects(self, ref: StreamRef, good: list[tuple[RawEntry, Envelope]]) -> list[bool]:
        """Per entry: two or more of its task's deliveries vanished without an outcome
        (their process died or stalled), so this one must run alone. An attempt begins once
        unless its delivery vanishes, so ``n`` deliveries so far at attempt ``a`` means
        ``n - (a - 1)`` vanished. After one, the task runs among the others again: most
        vanishings are a worker's own death (a node lost, the OOM killer), and running all
        its tasks one by one would stall the worker for as long as they take."""
        counts = await self.w.bus.deliveries(ref, [env.task.task_id for _, env in good])
        return [n - (env.attempt - 1) >= 2 for (_, env), n in zip(good, counts, strict=True)]

    async def _run_alone(
        self, ref: StreamRef, suspect: tuple[RawEntry, Envelope], pool: TierPool
    ) -> None:
        """Begin and run a suspect with nothing else running, then go on (in the reader: the
        next suspect waits for this one)."""
        envelope = suspect[1]
        log.warning(
            "task %s: an earlier delivery died with its process or stalled; running it "
            "with no other task beside it",
            envelope.task.task_id,
            extra={"action": "suspect", "task_id": envelope.task.task_id},
        )
        async with self.quarantine.alone():
            for flight in await self._start(ref, [suspect], pool, fresh=False, start=False):
                flight.settled = asyncio.Event()
                await self._process(flight)  # swallows a cancellation: ask again below
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise asyncio.CancelledError  # the reader is being stopped
                await flight.settled.wait()  # its commit landed (or failed for good)

    async def _start(
        self,
        ref: StreamRef,
        good: list[tuple[RawEntry, Envelope]],
        pool: TierPool,
        fresh: bool,
        *,
        start: bool = True,
    ) -> list[InFlight]:
        """Begin the deliveries; each begun one runs in its own asyncio task (``start``),
        or is returned for the caller to run."""
        if not good:
            return []
        # An ordinary delivery is in the quarantine from before its begin (which counts it)
        # until it settles (``_settle``): none is begun while a suspect waits or runs, and a
        # suspect waits for those begun before it.
        quarantine, keys = self.quarantine, [(ref.name, e.entry_id) for e, _ in good]
        if start and not quarantine.try_enter(keys):
            await quarantine.enter(keys)
        now = utcnow()  # one clock read for the batch: they start together
        at, ts = now_ms(), orjson.dumps(now)
        # Every event of a delivery shares these fields: encoded once, for the started
        # event now and the terminal one at commit.
        contexts = [self._event_context(ref, env) if self.outbox else None for _, env in good]
        waits = [max(0, at - env.enqueued_ms) for _, env in good]
        items = [
            tuple.__new__(  # a BeginItem (see transport/base.py)
                BeginItem,
                (
                    e.entry_id,
                    env.task.task_id,
                    env.attempt,
                    self._started_event(context, ts, wait) if context is not None else b"",
                ),
            )
            for (e, env), context, wait in zip(good, contexts, waits, strict=True)
        ]
        try:
            begun = await self.w.bus.begin(ref, self.group, self.w.consumer, items, fresh=fresh)
        except BaseException as exc:
            # The entries stay pending under this consumer and are reclaimed later.
            pool.release(len(good))
            if start:
                quarantine.leave(*keys)
            if not isinstance(exc, TransportError):
                raise  # cancelled (shutdown), or a bug
            log.warning("begin failed: %s", exc, extra={"action": "begin_failed"})
            return []
        flights = []
        for (entry, envelope), context, wait, status, key in zip(
            good, contexts, waits, begun, keys, strict=True
        ):
            if status.status != "ok":
                pool.release()
                if start:
                    quarantine.leave(key)
                if status.status == "dup":
                    self.w.stats.duplicates += 1
                else:
                    self.w.stats.lost_ownership += 1
                continue
            flight = InFlight(
                ref,
                entry.entry_id,
                envelope,
                status.deliveries,
                started_at=now,
                context=context,
                queue_ms=wait,
            )
            self.w.inflight[(ref.name, entry.entry_id)] = flight
            flights.append(flight)
        pool.started(len(flights))
        self.w.stats.started += len(flights)
        if start and flights:
            task = asyncio.create_task(self._run_in_turn(flights))
            for flight in flights:
                flight.task = task
        return flights

    async def _run_in_turn(self, flights: list[InFlight]) -> None:
        """Start the deliveries one after the other in this task, each in a context of its
        own (``eager.py``). Most finish in their first step; the first that waits keeps
        this task to itself to its end, and the ones after it go on in a new task."""
        for at, flight in enumerate(flights):
            if flight.lost:  # lost before it started (``Worker._lost``): its slot is free
                self._settle(flight)
                continue
            flight.started = True
            coro, context = self._process(flight), contextvars.copy_context()
            try:
                finished, yielded = first_step(coro, context)
            except BaseException:
                self._hand_on(flights[at + 1 :])
                raise
            if not finished:
                self._hand_on(flights[at + 1 :])
                await Resume(coro, context, yielded)
                return

    def _hand_on(self, flights: list[InFlight]) -> None:
        if flights:
            task = asyncio.create_task(self._run_in_turn(flights))
            for flight in flights:
                flight.task = task

    def _settle(self, flight: InFlight) -> None:
        """The delivery is over (committed, handed back or abandoned): it no longer counts
        as active, its slot is free if it still held one, and a suspect may run (not before:
        a process dying with its commit in the air charges it a delivery)."""
        self._settle_all([flight])
        if not flight.handed:
            self.w.pools[flight.stream.tier].release()

    # the contract -------------------------------------------------------------------------

    async def _process(self, flight: InFlight) -> None:
        """One delivery, from its first step in its batch's task (``_run_in_turn``)."""
        try:
            await self._contract(flight)
        except asyncio.CancelledError:
            pass  # lost ownership or shutdown: the entry is someone else's, or handed back
        except Exception:  # the entry stays pending and is reclaimed; never crash the worker
            log.exception("delivery failed", extra={"action": "delivery_crashed"})
        finally:
            if not flight.handed:
                self._settle(flight)

    async def _contract(self, flight: InFlight) -> None:
        if flight.deliveries > self.w.agent_settings.max_deliveries:
            await self._exhausted(flight)  # crashes or failures: dead-letter it
            return
        task, ref, queue_ms = flight.envelope.task, flight.stream, flight.queue_ms
        started = time.monotonic()
        events: list[dict[str, Any]] = []
        if task.deadline is not None and task.expired():
            result = Result.failed(
                ErrorCode.DEADLINE_EXCEEDED, "deadline passed before the task started"
            )
            self._commit(flight, result, started, queue_ms, "expired", events)
            return
        if queue_ms > self._max_wait[ref.tier] and await self._overdue(
            flight, queue_ms, started, events
        ):
            return
        try:
            result = await self._run_metered(flight, events)
        except TimeoutError:
            result = Result.failed(ErrorCode.DEADLINE_EXCEEDED, "deadline passed while running")
        except Exception as exc:
            decision = decide(
                exc,
                deliveries=flight.deliveries,
                max_deliveries=self.w.agent_settings.max_deliveries,
                policy=self.w.agent_settings.retry,
                time_left_ms=_time_left_ms(flight),
            )
            if decision.action == "retry":
                await self._reschedule(
                    flight, ref.tier, decision.delay_ms, "retried", decision.reason
                )
                return
            if decision.action == "dead_letter":
                await self._dead_letter(flight, decision.code, decision.reason, started, queue_ms)
                return
            result = Result.failed(decision.code, decision.reason)
        kind = "succeeded" if result.status is not ResultStatus.FAILED else "failed"
        self._commit(flight, result, started, queue_ms, kind, events)

    async def _run_metered(self, flight: InFlight, events: list[dict[str, Any]]) -> Result:
        """Run the contract; model calls made inside add their tokens, cost and audit events.
        The deadline bounds the run (in line rather than a helper coroutine: per task)."""
        task = flight.envelope.task
        usage = start_usage()  # in this delivery's own task context: nothing to reset
        current_attempt.set(flight.envelope.attempt)
        if task.deadline is None:
            result = await self.runner.run(task)
        else:
            remaining = (task.deadline - utcnow()).total_seconds()
            async with asyncio.timeout(max(0.0, remaining)):
                result = await self.runner.run(task)
        if usage.attempts:
            result = usage.apply(result)
            if self.outbox:
                events += usage.audit_events(task.task_id)
        return result

    async def _overdue(
        self, flight: InFlight, queue_ms: int, started: float, events: list[dict[str, Any]]
    ) -> bool:
        """Apply the tier's on_overdue action; True when the delivery was handled."""
        ref = flight.stream
        action = self.w.config.tiers[ref.tier].on_overdue
        tiers = self.w.config.tier_names
        log.warning(
            "task waited %d ms in %s (max %d ms): %s",
            queue_ms,
            ref.tier,
            self.w.config.tiers[ref.tier].max_wait_ms,
            action,
            extra={"action": "overdue", "task_id": flight.envelope.task.task_id},
        )
        if action == "drop":
            result = Result.failed(ErrorCode.DROPPED, f"waited {queue_ms} ms in {ref.tier}")
            self._commit(flight, result, started, queue_ms, "dropped", events)
            return True
        index = tiers.index(ref.tier)
        if action == "degrade" and index + 1 < len(tiers):
            await self._reschedule(flight, tiers[index + 1], 0, "degraded", f"waited {queue_ms} ms")
            return True
        if self.outbox:
            events.append(self._event("overdue", flight, queue_ms=queue_ms))
        return False

    async def _exhausted(self, flight: InFlight) -> None:
        """Delivered more than max_deliveries times (crashes or failures): dead-letter it."""
        reason = f"delivered {flight.deliveries} times (max {self.w.agent_settings.max_deliveries})"
        await self._dead_letter(
            flight, ErrorCode.MAX_DELIVERIES, reason, time.monotonic(), flight.queue_ms
        )

    # outcomes -----------------------------------------------------------------------------

    def _finish(
        self, flight: InFlight, result: Result, started: float, queue_ms: int, now: datetime
    ) -> bytes:
        """The committed Result as JSON with the runtime's fields filled in. Written directly
        rather than through a new model: every value is valid already, and this is per task."""
        own = result.metrics
        # Truncated to the µs: round(x, 3) formats the float, a cost per task.
        latency_ms = int((time.monotonic() - started) * 1_000_000) / 1000
        if own is NO_METRICS:  # most results: the agent set none, nothing to merge
            metrics = {
                "latency_ms": latency_ms,
                "queue_ms": queue_ms,
                "tokens_used": 0,
                "cost_usd": 0.0,
                "attempts": flight.deliveries,
            }
        else:
            merged = {
                **own.__dict__,
                **(own.__pydantic_extra__ or {}),
                "latency_ms": latency_ms,
                "queue_ms": queue_ms,
                "attempts": flight.deliveries,
            }
            metrics = {k: v for k, v in merged.items() if v is not None}
        body: dict[str, Any] = {
            "task_id": flight.envelope.task.task_id,
            "status": result.status,  # a StrEnum: orjson writes its value
            "degraded": result.degraded,
            "metrics": metrics,
            "agent": self.w.agent.name,
            "agent_version": self.w.agent.version,
            "finished_at": now,
        }
        if result.output is not None:
            body["output"] = result.output
        if result.error is not None:
            body["error"] = {"code": result.error.code, "message": result.error.message}
        return orjson.dumps(body, default=to_jsonable_python)

    def _event(self, kind: str, flight: InFlight, **fields: Any) -> dict[str, Any]:
        return audit_event(kind, flight.envelope.task.task_id, **self._event_base(flight), **fields)

    def _event_base(self, flight: InFlight) -> dict[str, Any]:
        """The shared fields as a dict, for the rarer events (retried, overdue, ...)."""
        context = flight.context
        if context is None:
            context = self._event_context(flight.stream, flight.envelope)
        fields = orjson.loads(b"{" + context + b"}")
        del fields["task_id"]  # audit_event takes it on its own
        return {**fields, "deliveries": flight.deliveries}

    def _event_context(self, ref: StreamRef, envelope: Envelope) -> bytes:
        """Every event's fields of this delivery (its task id among them) but its delivery
        count, as JSON object members: encoded once per delivery, pasted into its started
        and terminal events."""
        task = envelope.task
        fixed = self._bases.get(ref.name)
        if fixed is None:  # once per stream: these never change for a worker
            fixed = self._bases[ref.name] = orjson.dumps(
                {
                    "agent": self.w.agent.name,
                    "agent_version": self.w.agent.version,
                    "tier": ref.tier,
                    "shard": ref.keys.shard,
                    "consumer": self.w.consumer,
                }
            )[1:-1]
        context = b'"task_id":%s,%s,"attempt":%d' % (
            orjson.dumps(task.task_id),
            fixed,
            envelope.attempt,
        )
        if task.tenant is not None:
            context += b',"tenant":' + orjson.dumps(task.tenant)
        if task.traceparent is not None:
            context += b',"traceparent":' + orjson.dumps(task.traceparent)
        return context

    @staticmethod
    def _started_event(context: bytes, ts: bytes, queue_ms: int) -> bytes:
        """The ``started`` event, written by the begin script as the delivery starts. Its
        JSON stops before the delivery count, which only that script knows and appends.
        ``ts`` is the batch's start time, encoded once for the batch."""
        return b'{"event_id":"%s","type":"started","ts":%s,"queue_ms":%d,%s,"deliveries":' % (
            uuid7_str().encode(),
            ts,
            queue_ms,
            context,
        )

    def _commit_events(
        self,
        flight: InFlight,
        kind: str,
        result_json: bytes,
        extra: list[dict[str, Any]],
        now: datetime,
    ) -> bytes:
        """The terminal event of one task, after any the run added (model calls, overdue),
        as a JSON array. Pasted from encoded parts: this is per task."""
        context = flight.context
        if context is None:
            context = self._event_context(flight.stream, flight.envelope)
        before = orjson.dumps(extra)[1:-1] + b"," if extra else b""
        return b'[%s{"event_id":"%s","type":"%s","ts":%s,"result":%s,%s,"deliveries":%d}]' % (
            before,
            uuid7_str().encode(),
            kind.encode(),
            orjson.dumps(now),  # the result's finished_at
            result_json,
            context,
            flight.deliveries,
        )

    def _commit(
        self,
        flight: InFlight,
        result: Result,
        started: float,
        queue_ms: int,
        kind: str,
        events: list[dict[str, Any]],
    ) -> None:
        """Hand the outcome to the group commit and free the slot; ``committed`` ends the
        delivery once it lands. Its task ends here: no future to wait on, per task."""
        now = utcnow()
        result_json = self._finish(flight, result, started, queue_ms, now)
        events_json = (
            self._commit_events(flight, kind, result_json, events, now) if self.outbox else b""
        )
        flight.committing = flight.handed = True
        env = flight.envelope
        item = tuple.__new__(  # a CommitItem (see transport/base.py)
            CommitItem, (flight.entry_id, env.task.task_id, result_json, env.reply, events_json)
        )
        outcome = _STATUS_TEXT[result.status]
        self.committer.put(flight.stream, item, (flight, outcome, started, queue_ms))
        # The slot is free for the next task at once; the delivery stays active (lower
        # tiers keep yielding to it) until its commit lands.
        self.w.pools[flight.stream.tier].release()

    def committed(
        self, tokens: list[Any], statuses: Sequence[str | None], error: BaseException | None
    ) -> None:
        """The group commit's answer for one stream's batch (each token is what ``_commit``
        gave): the batch settles and is counted at once, per status, since a counter's
        increment takes a lock; only the latencies are observed one by one."""
        if not tokens:
            return
        self._settle_all([token[0] for token in tokens])
        stats, tier = self.w.stats, tokens[0][0].stream.tier
        m = self._tm[tier] if self._tm is not None else None
        landed = time.monotonic()  # the batch's commit landed now
        completed: dict[str, int] = {}
        waits: list[float] = []
        runs: list[float] = []
        for (flight, outcome, started, queue_ms), status in zip(tokens, statuses, strict=True):
            if status == "ok":
                completed[outcome] = completed.get(outcome, 0) + 1
                if m is not None:
                    waits.append(queue_ms / 1000)
                    runs.append(landed - started)
            elif status is None:
                # Not retryable (e.g. the group is gone): the entry stays pending for a reclaim.
                log.error("commit failed: %s", error, extra={"action": "commit_failed"})
            elif status == "dup":
                stats.duplicates += 1
            else:
                # A stale run (a paused or partitioned worker): the fence held. Rare, and
                # what an operator looks for after a pause, so it is said once per task.
                stats.lost_ownership += 1
                log.warning(
                    "commit of task %s refused: another consumer owns its entry now",
                    flight.envelope.task.task_id,
                    extra={"action": "commit_refused"},
                )
        if m is not None:
            m.observe_many(waits, runs)
        for outcome, n in completed.items():
            stats.committed += n
            stats.by_status[outcome] += n
            if m is not None:
                m.completed[outcome].inc(n)

    def _settle_all(self, flights: list[InFlight]) -> None:
        """``_settle`` for deliveries of one stream at once, but for their slots: a
        committed batch was handed over, so its slots are free already."""
        inflight, ordinary = self.w.inflight, []
        for flight in flights:
            key = (flight.stream.name, flight.entry_id)
            inflight.pop(key, None)
            if flight.settled is not None:
                flight.settled.set()
            else:
                ordinary.append(key)
        if ordinary:
            self.quarantine.leave(*ordinary)
        self.w.pools[flights[0].stream.tier].finished(len(flights))

    async def _reschedule(
        self, flight: InFlight, tier: str, delay_ms: int, kind: str, reason: str
    ) -> None:
        env = flight.envelope
        events = (
            [self._event(kind, flight, reason=reason, delay_ms=delay_ms, to_tier=tier)]
            if self.outbox
            else []
        )
        item = Reschedule(
            entry_id=flight.entry_id,
            task_id=env.task.task_id,
            due_ms=now_ms() + delay_ms,
            tier=tier,
            task_json=encode_task(env.task),
            attempt=env.attempt + 1,
            reply=env.reply,
            events_json=encode_events(events),
        )
        flight.committing = True
        status = await self.w.bus.reschedule(flight.stream, self.group, self.w.consumer, item)
        self._count(status, "retried")
        if status == "ok" and self._tm is not None:
            self._tm[flight.stream.tier].completed[kind].inc()

    async def _dead_letter(
        self, flight: InFlight, reason: ErrorCode, error: str, started: float, queue_ms: int
    ) -> None:
        failed = Result.failed(ErrorCode.DEAD_LETTERED, f"{reason}: {error}")
        result_json = self._finish(flight, failed, started, queue_ms, utcnow())
        events = (
            [self._event("dead_lettered", flight, reason=reason, error=error)]
            if self.outbox
            else []
        )
        item = DeadLetter(
            entry_id=flight.entry_id,
            reason=reason,
            error=error,
            task_id=flight.envelope.task.task_id,
            result_json=result_json,
            reply=flight.envelope.reply,
            events_json=encode_events(events),
        )
        flight.committing = True
        status = await self.w.bus.dead_letter(flight.stream, self.group, self.w.consumer, item)
        self._count(status, "dead_lettered")
        if status == "ok" and self._tm is not None:
            self._observe(flight.stream.tier, "dead_lettered", started, queue_ms)
        log.warning(
            "dead-lettered %s: %s",
            flight.envelope.task.task_id,
            reason,
            extra={"action": "dead_lettered", "task_id": flight.envelope.task.task_id},
        )

    async def _dead_letter_raw(
        self, ref: StreamRef, entry: RawEntry, reason: ErrorCode, error: str
    ) -> None:
        """An entry that is not a task (undecodable, or its body is gone). When its task id
        can still be read (``salvage_ids``), the task fails with the reason, so that its
        submitter hears it rather than waiting for ever."""
        entry_id = entry.entry_id
        salvaged = (
            salvage_ids(entry.fields, parse=reason == ErrorCode.DECODE_ERROR)
            if reason != ErrorCode.PAYLOAD_LOST
            else None
        )
        task_id, reply = salvaged if salvaged is not None else (None, "")
        result_json = b"" if task_id is None else self._failed_json(task_id, reason, error)
        kind = "payload_lost" if reason == ErrorCode.PAYLOAD_LOST else "dead_lettered"
        fields = {"agent": self.w.agent.name, "entry": entry_id, "reason": reason, "error": error}
        events, unbound = (
            [audit_event(kind, task_id, **fields)],
            [audit_event(kind, None, **fields)],
        )
        item = DeadLetter(
            entry_id,
            reason,
            error,
            task_id=task_id,
            result_json=result_json,
            reply=reply,
            events_json=encode_events(events) if self.outbox else b"",
            salvaged=task_id is not None,
            unbound_events_json=encode_events(unbound) if self.outbox else b"",
        )
        status = await self.w.bus.dead_letter(ref, self.group, self.w.consumer, item)
        self._count(status, "dead_lettered")
        if status == "ok" and self._tm is not None:
            self._tm[ref.tier].completed["dead_lettered"].inc()
            if reason == ErrorCode.DECODE_ERROR and self._decode_errors is not None:
                self._decode_errors.inc()
        log.warning(
            "dead-lettered entry %s of %s: %s (%s)",
            entry_id,
            ref.name,
            reason,
            error,
            extra={"action": "dead_lettered", "task_id": task_id},
        )

    def _failed_json(self, task_id: str, reason: ErrorCode, error: str) -> bytes:
        """A dead-lettered task's Result, for a task that never decoded (no flight)."""
        failed = Result(
            task_id=task_id,
            status=ResultStatus.FAILED,
            error=ErrorInfo(code=ErrorCode.DEAD_LETTERED, message=f"{reason}: {error}"),
            agent=self.w.agent.name,
            agent_version=self.w.agent.version,
            finished_at=utcnow(),
        )
        return encode_result(failed)

    async def payload_lost(self, ref: StreamRef, entry_ids: list[str]) -> None:
        """Ids XAUTOCLAIM reported deleted: already out of the PEL; record a tombstone each."""
        for entry_id in entry_ids:
            events = [audit_event("payload_lost", None, agent=self.w.agent.name, entry=entry_id)]
            item = DeadLetter(
                entry_id,
                ErrorCode.PAYLOAD_LOST,
                _BODY_GONE,
                events_json=encode_events(events) if self.outbox else b"",
                check_owner=False,
            )
            await self.w.bus.dead_letter(ref, self.group, self.w.consumer, item)
            self.w.stats.dead_lettered += 1

    async def hand_back(self, flights: list[InFlight]) -> None:
        """Make unfinished entries claimable at once (idle = visibility timeout), without
        counting the delivery they had here."""
        vis = self.w.agent_settings.visibility_timeout_ms
        by_stream: dict[StreamRef, list[tuple[str, str]]] = {}
        for flight in flights:
            if not flight.committing:
                item = (flight.entry_id, flight.envelope.task.task_id)
                by_stream.setdefault(flight.stream, []).append(item)
        for ref, items in by_stream.items():
            try:
                await self.w.bus.hand_back(ref, self.group, self.w.consumer, items, vis)
            except TransportError as exc:
                log.warning("hand back failed (reclaimed after the timeout): %s", exc)

    def _observe(self, tier: str, status: str, started: float, queue_ms: int) -> None:
        assert self._tm is not None
        self._tm[tier].observe(queue_ms / 1000, time.monotonic() - started)
        self._tm[tier].completed[status].inc()

    def _count(self, status: str, what: str) -> None:
        stats = self.w.stats
        if status == "ok":
            setattr(stats, what, getattr(stats, what) + 1)
        elif status == "dup":
            stats.duplicates += 1
        else:
            stats.lost_ownership += 1


def _time_left_ms(flight: InFlight) -> float | None:
    deadline = flight.envelope.task.deadline
    if deadline is None:
        return None
    return (deadline - utcnow()).total_seconds() * 1000
