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
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from deepagents.config.schema import CatchUp, Overlap, ScheduleConfig
from deepagents.contract.task import Task
from deepagents.errors import SubmitError, TransportError
from deepagents.orchestrator.orchestrator import Orchestrator

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


class Outcome(StrEnum):
    FIRED = "fired"
    DUPLICATE = "duplicate"  # another leader fired it first: nothing added
    SKIPPED = "skipped"  # passed over by the catch-up or the overlap policy


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
    ) -> None:
        self.orchestrator, self.schedules = orchestrator, schedules
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
            self.stats.counts[Outcome.SKIPPED] += due.passed
            log.warning(
                "schedule %s: %d slot(s) passed over (catch_up: %s)",
                name,
                due.passed,
                config.catch_up.value,
                extra={"action": "schedule_skipped"},
            )
        out = []
        for slot in due.fire:
            outcome = await self._fire(name, config, slot, self._fired.get(name, last))
            if outcome is not Outcome.SKIPPED:
                self._fired[name] = slot
            out.append(Firing(name, slot, outcome))
        if due.cursor is not None:  # after the firings: a crash before it fires them again
            await self.cursors.advance(name, due.cursor)
        for firing in out:
            self.stats.counts[firing.outcome] += 1
            log.info(
                "schedule %s slot %d %s",
                name,
                firing.slot_ms,
                firing.outcome.value,
                extra={"action": f"schedule_{firing.outcome.value}", "task_id": firing.task_id},
            )
        return out

    async def _fire(
        self, name: str, config: ScheduleConfig, slot: int, previous: int | None
    ) -> Outcome:
        """Fire one slot, unless the slot fired before it (``previous``) still runs and the
        overlap policy is skip."""
        if config.overlap is Overlap.SKIP and await self._running(name, previous):
            return Outcome.SKIPPED
        handle = await self.orchestrator.submit(_task(name, config, slot))
        return Outcome.DUPLICATE if handle.duplicate else Outcome.FIRED

    async def _running(self, name: str, slot: int | None) -> bool:
        """Whether the task of ``slot`` has not ended yet (overlap: skip)."""
        if slot is None:
            return False
        state = await self.orchestrator.task_state(fire_id(name, slot))
        return state not in (None, "done", "dead")


def _task(name: str, config: ScheduleConfig, slot_ms: int) -> Task:
    return Task(
        task_id=fire_id(name, slot_ms),
        intent=config.intent,
        payload={**config.payload},
        tenant=config.tenant,
        priority=config.priority,
    )
