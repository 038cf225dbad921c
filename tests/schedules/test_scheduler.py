"""The scheduler on a real Redis, its clock given: the catch-up policies after 10 s with no
leader, overlap skip, and two leaders at once firing one slot once."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from deepagents.config import Settings, parse_config
from deepagents.orchestrator import Orchestrator
from deepagents.orchestrator.schedules import Firing, Outcome, Scheduler, fire_id, jitter_ms
from deepagents.store.schedule_cursors import ScheduleCursors
from deepagents.telemetry.metrics import ScheduleMetrics

CONFIG = """
agents:
  echo: {class: "agents.echo:EchoAgent"}
schedules:
  skip: {intent: echo, every_s: 1, catch_up: skip}
  last: {intent: echo, every_s: 1, catch_up: last}
  all: {intent: echo, every_s: 1, catch_up: all, catch_up_window_s: 60}
  single: {intent: echo, every_s: 1, overlap: skip}
  one: {intent: echo, every_s: 1, overlap: buffer_one}
  jittered: {intent: echo, every_s: 60, jitter_s: 30}
"""
S = 1_000
T0 = 1_800_000_000_000  # a slot boundary


class Held:
    """A lease this process always holds: as two leaders at once would each believe."""

    owner = "test"

    async def hold(self) -> bool:
        return True

    async def release(self) -> None:
        return None


@pytest.fixture
async def orch(client: Redis, settings: Settings) -> AsyncIterator[Orchestrator]:
    config = parse_config(CONFIG)
    async with Orchestrator.from_client(client, config=config, settings=settings) as o:
        yield o


def _scheduler(
    orch: Orchestrator, client: Redis, *names: str, metrics: ScheduleMetrics | None = None
) -> Scheduler:
    schedules = {n: orch.config.schedules[n] for n in names}
    cursors = ScheduleCursors(client, orch.keys)
    return Scheduler(orch, schedules, cursors, Held(), metrics=metrics)


def _fired(firings: list[Firing]) -> list[int]:
    return [(f.slot_ms - T0) // S for f in firings if f.outcome is Outcome.FIRED]


async def test_after_ten_seconds_without_a_leader_each_catch_up_does_what_it_says(
    orch: Orchestrator, client: Redis
) -> None:
    scheduler = _scheduler(orch, client, "skip", "last", "all")
    assert len(_fired(await scheduler.tick(T0 + 100))) == 3  # each fires its slot T0
    # no leader for 10 s: slots 1..10 passed
    after = await scheduler.tick(T0 + 10 * S + 100)
    by_name = {n: _fired([f for f in after if f.schedule == n]) for n in ("skip", "last", "all")}
    assert by_name == {"skip": [], "last": [10], "all": list(range(1, 11))}
    # then each goes on at the next slot
    nxt = await scheduler.tick(T0 + 11 * S + 100)
    assert sorted((f.schedule, _fired([f])) for f in nxt) == [
        ("all", [11]),
        ("last", [11]),
        ("skip", [11]),
    ]
    assert scheduler.stats.counts[Outcome.SKIPPED] == 10 + 9


async def test_two_leaders_at_once_fire_one_slot_once(orch: Orchestrator, client: Redis) -> None:
    one, two = _scheduler(orch, client, "all"), _scheduler(orch, client, "all")
    (first,) = await one.tick(T0 + 100)
    await client.delete(orch.keys.schedule_cursor("all"))  # as if one's cursor write was lost
    (second,) = await two.tick(T0 + 200)
    assert (first.outcome, second.outcome) == (Outcome.FIRED, Outcome.DUPLICATE)
    assert first.task_id == second.task_id == fire_id("all", T0)


async def test_overlap_skip_passes_over_a_slot_while_the_last_task_has_not_ended(
    orch: Orchestrator, client: Redis
) -> None:
    scheduler = _scheduler(orch, client, "single")
    assert _fired(await scheduler.tick(T0 + 100)) == [0]
    (busy,) = await scheduler.tick(T0 + S + 100)  # slot 0's task is still queued
    assert busy.outcome is Outcome.SKIPPED
    assert await orch.cancel(fire_id("single", T0)) == "ok"  # it ends
    assert _fired(await scheduler.tick(T0 + 2 * S + 100)) == [2]


def _outcomes(firings: list[Firing]) -> list[tuple[int, str]]:
    return [((f.slot_ms - T0) // S, f.outcome.value) for f in firings]


async def test_buffer_one_holds_one_slot_until_the_task_before_it_ends(
    orch: Orchestrator, client: Redis
) -> None:
    registry = CollectorRegistry()
    scheduler = _scheduler(orch, client, "one", metrics=ScheduleMetrics(registry))
    assert _outcomes(await scheduler.tick(T0 + 100)) == [(0, "fired")]
    assert _outcomes(await scheduler.tick(T0 + S + 100)) == [(1, "buffered")]  # 0 still queued
    assert _outcomes(await scheduler.tick(T0 + 2 * S + 100)) == [(2, "skipped")]  # one is held
    assert await orch.cancel(fire_id("one", T0)) == "ok"  # slot 0's task ends
    # The held slot fires first, with its own slot's id; the new slot is held behind it.
    assert _outcomes(await scheduler.tick(T0 + 3 * S + 100)) == [(1, "fired"), (3, "buffered")]
    assert await orch.cancel(fire_id("one", T0 + S)) == "ok"
    # The held slot lives in Redis: a new leader fires it.
    again = _scheduler(orch, client, "one")
    assert _outcomes(await again.tick(T0 + 3 * S + 200)) == [(3, "fired")]

    def count(outcome: str) -> float | None:
        labels = {"schedule": "one", "outcome": outcome}
        return registry.get_sample_value("deepagents_schedule_firings_total", labels)

    assert (count("fired"), count("buffered"), count("skipped")) == (2, 2, 1)
    lateness = registry.get_sample_value(
        "deepagents_schedule_lateness_seconds_count", {"schedule": "one"}
    )
    assert lateness == 2


async def test_a_paused_schedule_passes_its_slots_over_and_resumes_at_the_next(
    orch: Orchestrator, client: Redis
) -> None:
    cursors = ScheduleCursors(client, orch.keys)
    one, two = _scheduler(orch, client, "last"), _scheduler(orch, client, "last")
    assert _fired(await one.tick(T0 + 100)) == [0]
    await cursors.pause("last", "test")
    assert await one.tick(T0 + S + 100) == []
    assert await two.tick(T0 + 2 * S + 100) == []  # every leader reads the pause
    assert one.stats.counts[Outcome.SKIPPED] == 1 and two.stats.counts[Outcome.SKIPPED] == 1
    assert await cursors.resume("last") is True
    # No burst of the paused slots (catch_up: last would fire one): the next slot only.
    assert _fired(await two.tick(T0 + 3 * S + 100)) == [3]


def test_jitter_is_bounded_and_the_same_for_one_slot_everywhere() -> None:
    delays = [jitter_ms("jittered", T0 + i * 60 * S, 30) for i in range(200)]
    assert all(0 <= d <= 30 * S for d in delays)
    assert len(set(delays)) > 150  # spread, not one value
    assert delays == [jitter_ms("jittered", T0 + i * 60 * S, 30) for i in range(200)]
    assert jitter_ms("jittered", T0, 0) == 0


async def test_a_jittered_slot_s_task_waits_its_delay_whichever_leader_fires_it(
    orch: Orchestrator, client: Redis
) -> None:
    now = int(time.time() * 1000)
    slot = (now // (60 * S) + 1) * 60 * S  # the next slot: its task is for later
    if jitter_ms("jittered", slot, 30) == 0:  # no delay: nothing to see at this slot
        slot += 60 * S
    delay = jitter_ms("jittered", slot, 30)
    (first,) = await _scheduler(orch, client, "jittered").tick(slot + 100)
    await client.delete(orch.keys.schedule_cursor("jittered"))
    (second,) = await _scheduler(orch, client, "jittered").tick(slot + 200)
    assert (first.outcome, second.outcome) == (Outcome.FIRED, Outcome.DUPLICATE)
    info = await orch.lookup(fire_id("jittered", slot))
    assert info is not None
    assert (info["state"], int(info["due_ms"])) == ("scheduled", slot + delay)
