"""Recurring schedules (docs/scheduling.md): one task per slot, fired by the one scheduler
that holds the Redis lease.

A slot is a whole multiple of the schedule's ``every_s`` since the epoch; its task's id is
derived from the schedule's name and the slot (``sched.<name>.<slot ms>``). That id is the
idempotency key: the enqueue script adds nothing for a task id it holds, so two leaders at
once (a paused one that lost its lease and woke), or a leader that died between firing a
slot and moving its cursor, never fire one slot twice."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from deepagents.config.schema import CatchUp, Overlap, ScheduleConfig
from deepagents.contract.task import Task
from deepagents.errors import SubmitError, TransportError
from deepagents.orchestrator.orchestrator import Orchestrator
from deepagents.telemetry.metrics import ScheduleMetrics

log = logging.getLogger("deepagents.schedules")

# At most this many slots fired per schedule per tick: a long catch-up goes on next tick.
_PER_TICK = 500
_COUNTED = 100_000


class Lease(Protocol):
    owner: str

    async def hold(self) -> bool: ...

    async def release(self) -> None: ...


class Cursors(Protocol):
    async def slot(self, name: str) -> int | None: ...

    async def advance(self, name: str, slot_ms: int) -> None: ...

    async def paused(self, name: str) -> bool: ...

    async def buffered(self, name: str) -> int | None: ...

    async def hold(self, name: str, slot_ms: int | None) -> None: ...


class Outcome(StrEnum):
    FIRED = "fired"
    DUPLICATE = "duplicate"  # another leader fired it first: nothing added
    SKIPPED = "skipped"  # passed over by the catch-up or the overlap policy, or paused
    BUFFERED = "buffered"  # held by overlap buffer_one until the task before it ends


@dataclass(frozen=True, slots=True)
class Firing:
    schedule: str
    slot_ms: int
    outcome: Outcome

    @property
    def task_id(self) -> str:
        return fire_id(self.schedule, self.slot_ms)


@dataclass(slots=True)
class SchedulerStats:
    counts: dict[Outcome, int] = field(default_factory=lambda: dict.fromkeys(Outcome, 0))


def fire_id(schedule: str, slot_ms: int) -> str:
    """The task id of one slot of one schedule (also its idempotency key)."""
    return f"sched.{schedule}.{slot_ms}"


def trigger_id(schedule: str, at_ms: int) -> str:
    """The task id of a firing by hand (``deepagents schedules trigger``): never a slot's."""
    return f"sched.{schedule}.trigger.{at_ms}"


def jitter_ms(schedule: str, slot_ms: int, jitter_s: float) -> int:
    """How long after its slot a slot's task runs: drawn from the fire id, so every leader
    (two at once, or one after a failover) gives one slot the same delay, and the task id
    stays the slot's."""
    bound = int(jitter_s * 1000)
    if bound <= 0:
        return 0
    digest = hashlib.blake2b(fire_id(schedule, slot_ms).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (bound + 1)


@dataclass(frozen=True, slots=True)
class Due:
    """What one tick does with a schedule: the slots to fire, how many it passes over, and
    the slot its cursor moves to once done (None: nothing is due)."""

    fire: list[int]
    passed: int
    cursor: int | None


def due_slots(config: ScheduleConfig, last: int | None, now_ms: int) -> Due:
    """The slots after ``last`` up to ``now_ms``, by the catch-up policy. Without a ``last``
    (a new schedule) only the slot due now fires. A catch-up longer than ``_PER_TICK`` slots
    fires its oldest now and goes on at the next tick; skip and last count at most
    ``_COUNTED`` passed slots (a cron schedule counts them one by one)."""
    slots = config.slots()
    newest = slots.latest(now_ms)
    if last is None:
        return Due([newest], 0, newest)
    if newest <= last:
        return Due([], 0, None)
    if config.catch_up is not CatchUp.ALL:
        pending = len(slots.after(last, newest, _COUNTED))
        if pending == 1:
            return Due([newest], 0, newest)
        if config.catch_up is CatchUp.SKIP:
            return Due([], pending, newest)
        return Due([newest], pending - 1, newest)
    oldest = now_ms - int(config.catch_up_window_s * 1000)
    passed = slots.after(last, oldest - 1, _COUNTED) if oldest > last else []
    fire = slots.after(max(last, oldest - 1), newest, _PER_TICK)
    return Due(fire, len(passed), fire[-1])


class Scheduler:
    def __init__(
        self,
        orchestrator: Orchestrator,
        schedules: Mapping[str, ScheduleConfig],
        cursors: Cursors,
        lease: Lease,
        *,
        interval_s: float = 0.2,
        metrics: ScheduleMetrics | None = None,
    ) -> None:
        self.orchestrator, self.schedules = orchestrator, schedules
        self.metrics = metrics
        self.cursors, self.lease, self.interval_s = cursors, lease, interval_s
        self.leading = False
        self.stats = SchedulerStats()
        # The newest slot this process fired per schedule (overlap: skip looks at its task);
        # a new leader starts from the schedule's cursor.
        self._fired: dict[str, int] = {}

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                try:
                    await self.tick()
                except (TransportError, SubmitError) as exc:  # the next tick tries again
                    log.warning("schedule tick failed: %s", exc, extra={"action": "schedule_tick"})
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.interval_s)
        finally:
            with contextlib.suppress(TransportError):
                await self.lease.release()

    async def tick(self, now_ms: int | None = None) -> list[Firing]:
        leading = await self.lease.hold()
        if leading != self.leading:
            log.info(
                "scheduler %s %s the lease",
                self.lease.owner,
                "took" if leading else "lost",
                extra={"action": "schedule_leader" if leading else "schedule_follower"},
            )
        self.leading = leading
        if not leading:
            return []
        at = int(time.time() * 1000) if now_ms is None else now_ms
        out: list[Firing] = []
        for name in sorted(self.schedules):
            out += await self._tick_one(name, self.schedules[name], at)
        return out

    async def _tick_one(self, name: str, config: ScheduleConfig, now_ms: int) -> list[Firing]:
        last = await self.cursors.slot(name)
        due = due_slots(config, last, now_ms)
        if due.passed:
            self._skipped(name, due.passed, f"catch_up: {config.catch_up.value}")
        if due.fire and await self.cursors.paused(name):
            # Passed over, the cursor moved on: a resume fires from the next slot, no burst.
            self._skipped(name, len(due.fire), "paused")
            if due.cursor is not None:
                await self.cursors.advance(name, due.cursor)
            return []
        out = []
        if config.overlap is Overlap.BUFFER_ONE:
            out += await self._release_held(name, config, now_ms, last)
        for slot in due.fire:
            outcome = await self._fire(name, config, slot, self._fired.get(name, last), now_ms)
            if outcome in (Outcome.FIRED, Outcome.DUPLICATE):
                self._fired[name] = slot
            out.append(Firing(name, slot, outcome))
        if due.cursor is not None:  # after the firings: a crash before it fires them again
            await self.cursors.advance(name, due.cursor)
        for firing in out:
            self.stats.counts[firing.outcome] += 1
            if self.metrics is not None:
                self.metrics.firings.labels(name, firing.outcome.value).inc()
            log.info(
                "schedule %s slot %d %s",
                name,
                firing.slot_ms,
                firing.outcome.value,
                extra={"action": f"schedule_{firing.outcome.value}", "task_id": firing.task_id},
            )
        return out

    def _skipped(self, name: str, n: int, why: str) -> None:
        self.stats.counts[Outcome.SKIPPED] += n
        if self.metrics is not None:
            self.metrics.firings.labels(name, Outcome.SKIPPED.value).inc(n)
        log.warning(
            "schedule %s: %d slot(s) passed over (%s)",
            name,
            n,
            why,
            extra={"action": "schedule_skipped"},
        )

    async def _release_held(
        self, name: str, config: ScheduleConfig, now_ms: int, last: int | None
    ) -> list[Firing]:
        """buffer_one: the slot held fires once the task before it has ended."""
        held = await self.cursors.buffered(name)
        if held is None or await self._running(name, self._fired.get(name, last)):
            return []
        outcome = await self._submit(name, config, held, now_ms)
        self._fired[name] = held
        await self.cursors.hold(name, None)
        return [Firing(name, held, outcome)]

    async def _fire(
        self, name: str, config: ScheduleConfig, slot: int, previous: int | None, now_ms: int
    ) -> Outcome:
        """Fire one slot, unless the slot fired before it (``previous``) still runs and the
        overlap policy says otherwise: skip passes it over; buffer_one holds it, if it holds
        none yet (else passes it over)."""
        if config.overlap is not Overlap.ALLOW and await self._running(name, previous):
            if config.overlap is Overlap.SKIP or await self.cursors.buffered(name) is not None:
                return Outcome.SKIPPED
            await self.cursors.hold(name, slot)
            return Outcome.BUFFERED
        return await self._submit(name, config, slot, now_ms)

    async def _submit(self, name: str, config: ScheduleConfig, slot: int, now_ms: int) -> Outcome:
        delay = jitter_ms(name, slot, config.jitter_s)
        handle = await self.orchestrator.submit(_task(name, config, slot, slot + delay))
        if self.metrics is not None and not handle.duplicate:
            # How long after its slot the leader fired it (a buffered slot: after the task
            # before it ended; a catch-up: after the outage).
            self.metrics.lateness.labels(name).observe(max(0, now_ms - slot) / 1000)
        return Outcome.DUPLICATE if handle.duplicate else Outcome.FIRED

    async def _running(self, name: str, slot: int | None) -> bool:
        """Whether the task of ``slot`` has not ended yet (overlap: skip)."""
        if slot is None:
            return False
        state = await self.orchestrator.task_state(fire_id(name, slot))
        return state not in (None, "done", "dead")


def _task(name: str, config: ScheduleConfig, slot_ms: int, run_ms: int) -> Task:
    """The slot's task; run no earlier than ``run_ms`` (its jitter) when that is ahead."""
    return Task(
        task_id=fire_id(name, slot_ms),
        intent=config.intent,
        payload={**config.payload},
        tenant=config.tenant,
        priority=config.priority,
        not_before=_ms_time(run_ms) if run_ms > slot_ms else None,
    )


def trigger_task(name: str, config: ScheduleConfig, at_ms: int) -> Task:
    """A firing by hand: now, with an id of its own (``trigger_id``)."""
    return Task(
        task_id=trigger_id(name, at_ms),
        intent=config.intent,
        payload={**config.payload},
        tenant=config.tenant,
        priority=config.priority,
    )


def _ms_time(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


_YEAR_MS = 366 * 86_400_000


async def schedule_views(
    cursors: Cursors, schedules: Mapping[str, ScheduleConfig]
) -> list[dict[str, Any]]:
    """Each schedule as ``deepagents schedules list`` and ``status`` show it: its rhythm and
    policies, whether it is paused, the slot buffer_one holds, its last and next slot."""
    now = int(time.time() * 1000)
    out = []
    for name in sorted(schedules):
        config = schedules[name]
        upcoming = config.slots().after(now, now + _YEAR_MS, 1)
        out.append(
            {
                "schedule": name,
                "intent": config.intent,
                "every_s": config.every_s,
                "cron": config.cron,
                "timezone": config.timezone if config.cron else None,
                "overlap": config.overlap.value,
                "catch_up": config.catch_up.value,
                "jitter_s": config.jitter_s,
                "paused": await cursors.paused(name),
                "buffered": _iso(await cursors.buffered(name)),
                "last_slot": _iso(await cursors.slot(name)),
                "next_slot": _iso(upcoming[0] if upcoming else None),
            }
        )
    return out


def _iso(ms: int | None) -> str | None:
    return None if ms is None else _ms_time(ms).isoformat()
