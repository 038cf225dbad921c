"""The scheduler on a real Redis, its clock given: the catch-up policies after 10 s with no
leader, overlap skip, and two leaders at once firing one slot once."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from deepagents.config import Settings, parse_config
from deepagents.orchestrator import Orchestrator
from deepagents.orchestrator.schedules import Firing, Outcome, Scheduler, fire_id
from deepagents.store.schedule_cursors import ScheduleCursors

CONFIG = """
agents:
  echo: {class: "agents.echo:EchoAgent"}
schedules:
  skip: {intent: echo, every_s: 1, catch_up: skip}
  last: {intent: echo, every_s: 1, catch_up: last}
  all: {intent: echo, every_s: 1, catch_up: all, catch_up_window_s: 60}
  single: {intent: echo, every_s: 1, overlap: skip}
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


def _scheduler(orch: Orchestrator, client: Redis, *names: str) -> Scheduler:
    schedules = {n: orch.config.schedules[n] for n in names}
    return Scheduler(orch, schedules, ScheduleCursors(client, orch.keys), Held())


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
