"""Every way a delivery ends in exactly one owner-checked script: commit (a result, through
the group commit), reschedule (retry or degrade), or dead-letter. Nothing is dropped
silently: an entry that is not a task is dead-lettered too."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any, Protocol

from deepagents.contract.codec import encode_result, encode_task
from deepagents.contract.events import AuditEvent
from deepagents.contract.result import ErrorCode, ErrorInfo, Result, ResultStatus
from deepagents.contract.task import utcnow
from deepagents.errors import TransportError
from deepagents.modelcall.usage import current_usage
from deepagents.telemetry.metrics import TierMetrics
from deepagents.transport.base import (
    ChildWait,
    ChildWaits,
    CommitItem,
    DeadLetter,
    Held,
    HumanWaits,
    Park,
    RawEntry,
    Reschedule,
    StreamRef,
    TaskQueue,
    now_ms,
)
from deepagents.transport.entries import salvage_ids
from deepagents.worker.asking import Asking
from deepagents.worker.delegation import Delegating, Parentage, notify_parent
from deepagents.worker.delivery_kit import DeliveryKit
from deepagents.worker.flight import FlightState, InFlight
from deepagents.worker.settle import Settler
from deepagents.worker.stream_commits import CommitBounds, Committer
from deepagents.worker.versioning import VersionTally

log = logging.getLogger("deepagents.worker")
BODY_GONE = "the entry's body was deleted before it was processed"


class Ending(TaskQueue, HumanWaits, ChildWaits, Protocol):
    """The parts of the bus a delivery ends through: the queue's commit, retry, dead letter
    and hand back, or a park (for a person, or for its children)."""


class Outcomes:
    def __init__(
        self,
        kit: DeliveryKit,
        *,
        settler: Settler,
        capacities: dict[str, int],
        tally: VersionTally | None = None,
        parentage: Parentage | None = None,
    ) -> None:
        """``tally``: under a rollout, landed outcomes counted for this worker's version
        (``versioning.py``). ``parentage``: children's ends go to their parents after their
        commits land (``delegation.py``)."""
        bus, group, consumer = kit.bus, kit.group, kit.consumer
        agent, agent_settings, metrics = kit.agent, kit.agent_settings, kit.metrics
        tier_names = kit.config.tier_names
        self.bus: Ending = bus
        self.group, self.consumer = group, consumer
        self.agent, self.agent_settings = agent, agent_settings
        self.encoder, self.settler, self.stats, self.events = (
            kit.encoder,
            settler,
            kit.stats,
            kit.events,
        )
        self.tally, self.parentage = tally, parentage
        self.committer = Committer(
            bus,
            group,
            consumer,
            self.committed,
            CommitBounds(
                agent_settings.batch_size * 2,
                tier_rank={name: i for i, name in enumerate(tier_names)},
                # A tier's readers read on while up to a poolful of its commits are in the
                # air: the agent's slots never wait for Redis to write results.
                backlog=capacities,
            ),
        )
        # Children bound once per tier: the hot path does a dict lookup, never a label lookup.
        self._tm: dict[str, TierMetrics] | None = (
            {t: metrics.tier(agent.name, t) for t in tier_names} if metrics is not None else None
        )
        self._decode_errors = (
            metrics.decode_errors.labels(agent.name, "stream") if metrics is not None else None
        )
        self._children: dict[tuple[str, str], bytes] = {}  # (stream, entry) -> result
        self._notifying: set[asyncio.Task[None]] = set()

    # a result, through the group commit ---------------------------------------------------

    def commit(
        self,
        flight: InFlight,
        result: Result,
        started: float,
        queue_ms: int,
        kind: str,
        events: list[AuditEvent],
    ) -> None:
        """Hand the outcome to the group commit; ``committed`` ends the delivery once it
        lands. Its task ends here: no future to wait on, per task."""
        now = utcnow()
        result_json = self.encoder.result_json(flight, result, started, queue_ms, now)
        written = (
            self.encoder.commit_events(flight, kind, result_json, events, now)
            if self.events.wanted
            else ()
        )
        env = flight.envelope
        item = CommitItem(flight.entry_id, env.task.task_id, result_json, env.reply, written)
        outcome = result.status.value
        if env.task.parent_id is not None and self.parentage is not None:
            self._children[(flight.stream.name, flight.entry_id)] = result_json
        self.committer.put(flight.stream, item, (flight, outcome, started, queue_ms))
        self.settler.hand_over(flight)

    def committed(
        self, tokens: list[Any], statuses: Sequence[str | None], error: BaseException | None
    ) -> None:
        """The group commit's answer for one stream's batch (each token is what ``commit``
        gave): the batch settles and is counted at once, per status, since a counter's
        increment takes a lock; only the latencies are observed one by one."""
        if not tokens:
            return
        self.settler.settle_all([token[0] for token in tokens])
        stats, tier = self.stats, tokens[0][0].stream.tier
        m = self._tm[tier] if self._tm is not None else None
        landed = time.monotonic()  # the batch's commit landed now
        completed: dict[str, int] = {}
        waits: list[float] = []
        runs: list[float] = []
        for (flight, outcome, started, queue_ms), status in zip(tokens, statuses, strict=True):
            if self._children:
                self._child_committed(flight, status)
            if status == "ok":
                completed[outcome] = completed.get(outcome, 0) + 1
                if self.tally is not None:
                    self.tally.add(outcome, landed - started)
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
                task_id = flight.envelope.task.task_id
                log.warning(
                    "commit of task %s refused: another consumer owns its entry now",
                    task_id,
                    extra={"action": "commit_refused", "task_id": task_id},
                )
        if m is not None:
            m.observe_many(waits, runs)
        for outcome, n in completed.items():
            stats.committed += n
            stats.by_status[outcome] += n
            if m is not None:
                m.completed[outcome].inc(n)

    def _child_committed(self, flight: InFlight, status: str | None) -> None:
        result_json = self._children.pop((flight.stream.name, flight.entry_id), None)
        if result_json is not None and status == "ok":
            self._notify(flight, result_json)

    def _notify(self, flight: InFlight, result_json: bytes) -> None:
        """The child's outcome landed: its end goes to its parent, off the commit's path."""
        assert self.parentage is not None
        task = asyncio.create_task(notify_parent(self.parentage, flight.envelope.task, result_json))
        self._notifying.add(task)
        task.add_done_callback(self._notifying.discard)

    async def notified(self) -> None:
        """Wait for the ends in the air (shutdown): what is cut short, the sweep sends."""
        if self._notifying:
            await asyncio.wait(list(self._notifying), timeout=5)

    # a retry, a degrade, a dead letter ----------------------------------------------------

    async def reschedule(
        self,
        flight: InFlight,
        tier: str,
        delay_ms: int,
        kind: str,
        reason: str,
        before: list[AuditEvent] | None = None,
        *,
        counted: bool = True,
    ) -> None:
        """``before``: events of this delivery to record first (an overdue one).
        ``counted=False``: a wait (nothing was tried), with the same attempt and the
        delivery given back."""
        env = flight.envelope
        events = (
            [
                *(before or []),
                self.encoder.event(kind, flight, reason=reason, delay_ms=delay_ms, to_tier=tier),
            ]
            if self.events.wanted
            else []
        )
        usage = current_usage()  # this delivery's, when it ran: the next one counts it
        tokens, cost = usage.unrecorded() if usage is not None else (0, 0.0)
        item = Reschedule(
            entry_id=flight.entry_id,
            task_id=env.task.task_id,
            due_ms=now_ms() + delay_ms,
            tier=tier,
            task_json=encode_task(env.task),
            attempt=env.attempt + 1 if counted else env.attempt,
            reply=env.reply,
            events=events,
            counted=counted,
            spent_tokens=tokens,
            spent_cost_usd=cost,
        )
        flight.move(FlightState.RESOLVING)
        status = await self.bus.reschedule(flight.stream, self.group, self.consumer, item)
        self._count(status, "retried")
        if status == "ok" and self._tm is not None:
            self._tm[flight.stream.tier].completed[kind].inc()

    async def park(self, flight: InFlight, asking: Asking) -> None:
        """The run asked a question: the task waits for a reply, holding no entry."""
        request, env = asking.request, flight.envelope
        assert request is not None
        events = []
        if self.events.wanted:
            waiting = self.encoder.event(
                "waiting",
                flight,
                ask=request.name,
                question=request.question,
                on_timeout=request.on_timeout,
                due_ms=request.due_ms,
                escalated=request.escalated or None,
            )
            events = [*asking.events, waiting]
        item = Park(
            entry_id=flight.entry_id,
            task_id=env.task.task_id,
            task_json=encode_task(env.task),
            tier=flight.stream.tier,
            ask=request.name,
            question=request.question,
            schema_json=request.schema_json,
            on_timeout=request.on_timeout,
            default_json=request.default_json,
            due_ms=request.due_ms,
            events=events,
        )
        flight.move(FlightState.RESOLVING)
        status = await self.bus.park(flight.stream, self.group, self.consumer, item)
        self._count(status, "parked")
        if status == "ok" and self._tm is not None:
            self._tm[flight.stream.tier].completed["parked"].inc()

    async def park_children(
        self,
        flight: InFlight,
        delegating: Delegating,
        events: list[AuditEvent],
        sweep_ms: int,
    ) -> None:
        """The run delegated: the task waits for its children, holding no entry."""
        request, env = delegating.request, flight.envelope
        assert request is not None
        if self.events.wanted:
            events = [
                *events,
                self.encoder.event(
                    "waiting_children",
                    flight,
                    children=list(request.awaiting),
                    mode=request.mode.value,
                ),
            ]
        deadline = env.task.deadline
        item = ChildWait(
            entry_id=flight.entry_id,
            task_id=env.task.task_id,
            task_json=encode_task(env.task),
            tier=flight.stream.tier,
            mode=request.mode,
            children=request.children,
            awaiting=request.awaiting,
            sweep_ms=sweep_ms,
            deadline_ms=0 if deadline is None else int(deadline.timestamp() * 1000),
            events=events,
        )
        flight.move(FlightState.RESOLVING)
        status = await self.bus.park_children(flight.stream, self.group, self.consumer, item)
        self._count("ok" if status in ("ok", "ready") else status, "parked")
        if status in ("ok", "ready") and self._tm is not None:
            self._tm[flight.stream.tier].completed["parked"].inc()

    async def dead_letter(
        self, flight: InFlight, reason: ErrorCode, error: str, started: float, queue_ms: int
    ) -> None:
        failed = Result.failed(ErrorCode.DEAD_LETTERED, f"{reason}: {error}")
        result_json = self.encoder.result_json(flight, failed, started, queue_ms, utcnow())
        events = (
            [self.encoder.event("dead_lettered", flight, reason=reason, error=error)]
            if self.events.wanted
            else []
        )
        item = DeadLetter(
            entry_id=flight.entry_id,
            reason=reason,
            error=error,
            task_id=flight.envelope.task.task_id,
            result_json=result_json,
            reply=flight.envelope.reply,
            events=events,
        )
        flight.move(FlightState.RESOLVING)
        status = await self.bus.dead_letter(flight.stream, self.group, self.consumer, item)
        self._count(status, "dead_lettered")
        if status == "ok" and flight.envelope.task.parent_id and self.parentage is not None:
            self._notify(flight, result_json)
        if status == "ok" and self.tally is not None:
            self.tally.add("dead_lettered", time.monotonic() - started)
        if status == "ok" and self._tm is not None:
            self._observe(flight.stream.tier, "dead_lettered", started, queue_ms)
        # A broken contract's cause names types and fields, never a payload value; other
        # errors may quote what the agent raised, so the line gives their code only.
        cause = f" ({error})" if reason == ErrorCode.INVALID_RESULT else ""
        log.warning(
            "dead-lettered %s: %s%s",
            flight.envelope.task.task_id,
            reason,
            cause,
            extra={"action": "dead_lettered", "task_id": flight.envelope.task.task_id},
        )

    async def dead_letter_raw(
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
        fields = {"agent": self.agent.name, "entry": entry_id, "reason": reason, "error": error}
        events, unbound = (
            [AuditEvent.of(kind, task_id, **fields)],
            [AuditEvent.of(kind, None, **fields)],
        )
        item = DeadLetter(
            entry_id,
            reason,
            error,
            task_id=task_id,
            result_json=result_json,
            reply=reply,
            events=self.events.keep(events),
            salvaged=task_id is not None,
            unbound_events=self.events.keep(unbound),
        )
        status = await self.bus.dead_letter(ref, self.group, self.consumer, item)
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
            agent=self.agent.name,
            agent_version=self.agent.version,
            finished_at=utcnow(),
        )
        return encode_result(failed)

    async def payload_lost(self, ref: StreamRef, entry_ids: list[str]) -> None:
        """Ids XAUTOCLAIM reported deleted: already out of the PEL; record a tombstone each."""
        for entry_id in entry_ids:
            events = [AuditEvent.of("payload_lost", None, agent=self.agent.name, entry=entry_id)]
            item = DeadLetter(
                entry_id,
                ErrorCode.PAYLOAD_LOST,
                BODY_GONE,
                events=self.events.keep(events),
                check_owner=False,
            )
            await self.bus.dead_letter(ref, self.group, self.consumer, item)
            self.stats.dead_lettered += 1

    async def hand_back(self, flights: list[InFlight]) -> None:
        """Make unfinished entries claimable at once (idle = visibility timeout), without
        counting the delivery they had here."""
        vis = self.agent_settings.visibility_timeout_ms
        by_stream: dict[StreamRef, list[Held]] = {}
        for flight in flights:
            if not flight.resolving:
                item = Held(flight.entry_id, flight.envelope.task.task_id)
                by_stream.setdefault(flight.stream, []).append(item)
        for ref, items in by_stream.items():
            try:
                await self.bus.hand_back(ref, self.group, self.consumer, items, vis)
            except TransportError as exc:
                log.warning("hand back failed (reclaimed after the timeout): %s", exc)

    def _observe(self, tier: str, status: str, started: float, queue_ms: int) -> None:
        assert self._tm is not None
        self._tm[tier].observe(queue_ms / 1000, time.monotonic() - started)
        self._tm[tier].completed[status].inc()

    def _count(self, status: str, what: str) -> None:
        stats = self.stats
        if status == "ok":
            setattr(stats, what, getattr(stats, what) + 1)
        elif status == "dup":
            stats.duplicates += 1
        else:
            stats.lost_ownership += 1
