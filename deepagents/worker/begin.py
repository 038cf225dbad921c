"""Begin a batch of entries: decode them, hold back suspects, and mark the rest running
in one begin script (a duplicate is acked and deleted there, nothing else)."""

from __future__ import annotations

import asyncio
import logging

from deepagents.contract.codec import Envelope
from deepagents.contract.result import ErrorCode
from deepagents.contract.task import utcnow
from deepagents.errors import TransportError
from deepagents.transport.base import BeginItem, RawEntry, StreamRef, TaskQueue, now_ms
from deepagents.transport.entries import decode_envelopes
from deepagents.worker.delivery_kit import DeliveryKit
from deepagents.worker.execution import Run
from deepagents.worker.flight import InFlight
from deepagents.worker.outcomes import BODY_GONE, Outcomes
from deepagents.worker.settle import Settler

log = logging.getLogger("deepagents.worker")

_Good = tuple[RawEntry, Envelope]


class Begin:
    def __init__(self, kit: DeliveryKit, *, run: Run, outcomes: Outcomes, settler: Settler) -> None:
        self.bus: TaskQueue = kit.bus
        self.group, self.consumer = kit.group, kit.consumer
        # What a producer may enqueue (Orchestrator.submit) is what a worker parses: a task
        # written past it straight to the stream is dead-lettered unread.
        self._max_task_bytes = kit.settings.max_payload_bytes
        self.run, self.outcomes, self.encoder = run, outcomes, kit.encoder
        self.settler, self.stats, self.events = settler, kit.stats, kit.events

    async def dispatch(
        self, ref: StreamRef, entries: list[RawEntry], *, fresh: bool = False
    ) -> None:
        """Start every entry of a batch; each holds one slot of its tier's pool until it
        hands its commit over (or is done otherwise). ``fresh``: new entries just read by
        this consumer (begin skips their owner check)."""
        good: list[_Good] = []
        decoded = decode_envelopes([entry.fields for entry in entries], self._max_task_bytes)
        for entry, envelope in zip(entries, decoded, strict=True):
            if isinstance(envelope, Envelope):
                good.append((entry, envelope))
                continue
            if entry.fields:
                # decode_error, or too_large for a task never parsed (TooLarge)
                await self.outcomes.dead_letter_raw(ref, entry, envelope.code, str(envelope))
            else:
                await self.outcomes.dead_letter_raw(ref, entry, ErrorCode.PAYLOAD_LOST, BODY_GONE)
            self.settler.give_back(ref.tier)
        if not good:
            return
        if not fresh:  # recovered entries (a restart's own, or reclaimed): any suspects?
            try:
                suspects = await self._suspects(ref, good)
            except TransportError as exc:
                self.settler.give_back(ref.tier, len(good))  # pending: read again or reclaimed
                log.warning("reading delivery counts failed: %s", exc,
                            extra={"action": "begin_failed"})  # fmt: skip
                return
            if any(suspects):
                ordinary = [g for g, suspect in zip(good, suspects, strict=True) if not suspect]
                self.run.start(await self.begin(ref, ordinary, fresh))
                for g, suspect in zip(good, suspects, strict=True):
                    if suspect:
                        await self._run_alone(ref, g)
                return
        self.run.start(await self.begin(ref, good, fresh))

    async def _suspects(self, ref: StreamRef, good: list[_Good]) -> list[bool]:
        """Per entry: two or more of its task's deliveries vanished without an outcome
        (their process died or stalled), so this one must run alone. An attempt begins once
        unless its delivery vanishes, so ``n`` deliveries so far at attempt ``a`` means
        ``n - (a - 1)`` vanished. After one, the task runs among the others again: most
        vanishings are a worker's own death (a node lost, the OOM killer), and running all
        its tasks one by one would stall the worker for as long as they take."""
        counts = await self.bus.deliveries(ref, [env.task.task_id for _, env in good])
        return [n - (env.attempt - 1) >= 2 for (_, env), n in zip(good, counts, strict=True)]

    async def _run_alone(self, ref: StreamRef, suspect: _Good) -> None:
        """Begin and run a suspect with nothing else running, then go on (in the reader: the
        next suspect waits for this one)."""
        envelope = suspect[1]
        log.warning(
            "task %s: an earlier delivery died with its process or stalled; running it "
            "with no other task beside it",
            envelope.task.task_id,
            extra={"action": "suspect", "task_id": envelope.task.task_id},
        )
        async with self.settler.alone():
            for flight in await self.begin(ref, [suspect], fresh=False, ordinary=False):
                flight.settled = asyncio.Event()
                await self.run.here(flight)  # swallows a cancellation: ask again below
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise asyncio.CancelledError  # the reader is being stopped
                await flight.settled.wait()  # its commit landed (or failed for good)

    async def begin(
        self, ref: StreamRef, good: list[_Good], fresh: bool, *, ordinary: bool = True
    ) -> list[InFlight]:
        """The begin script over the batch: the deliveries it began, in flight here. An
        ``ordinary`` one is in the quarantine from before its begin (which counts it) until
        it settles: none is begun while a suspect waits or runs, and a suspect waits for
        those begun before it."""
        if not good:
            return []
        keys = [(ref.name, e.entry_id) for e, _ in good]
        if ordinary:
            await self.settler.admit(keys)
        now = utcnow()  # one clock read for the batch: they start together
        at = now_ms()
        # Every event of a delivery shares these fields: made once, for the started event
        # now and the terminal one at commit.
        encoder = self.encoder
        contexts = [encoder.context(ref, env) if self.events.wanted else None for _, env in good]
        waits = [max(0, at - env.enqueued_ms) for _, env in good]
        items = [
            BeginItem(
                e.entry_id,
                env.task.task_id,
                env.attempt,
                encoder.started_event(env.task.task_id, context, now, wait)
                if context is not None
                else None,
            )
            for (e, env), context, wait in zip(good, contexts, waits, strict=True)
        ]
        try:
            begun = await self.bus.begin(ref, self.group, self.consumer, items, fresh=fresh)
        except BaseException as exc:
            # The entries stay pending under this consumer and are reclaimed later.
            self.settler.refuse(ref.tier, keys, ordinary=ordinary)
            if not isinstance(exc, TransportError):
                raise  # cancelled (shutdown), or a bug
            log.warning("begin failed: %s", exc, extra={"action": "begin_failed"})
            return []
        flights, refused = [], []
        for (entry, envelope), context, wait, status, key in zip(
            good, contexts, waits, begun, keys, strict=True
        ):
            if status.status != "ok":
                refused.append(key)
                if status.status == "dup":
                    self.stats.duplicates += 1
                else:
                    self.stats.lost_ownership += 1
                continue
            flights.append(
                InFlight(
                    ref,
                    entry.entry_id,
                    envelope,
                    status.deliveries,
                    started_at=now,
                    context=context,
                    queue_ms=wait,
                    stepped=status.stepped,
                    first_ms=status.first_ms,
                    spent_tokens=status.spent_tokens,
                    spent_cost_usd=status.spent_cost_usd,
                )
            )
        if refused:
            self.settler.refuse(ref.tier, refused, ordinary=ordinary)
        self.settler.track(ref.tier, flights)
        self.stats.started += len(flights)
        return flights
