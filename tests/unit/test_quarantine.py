"""The quarantine's rules, without Redis: a suspect runs with no ordinary delivery beside
it, ordinary ones wait for suspects, and a drain that gives up is not repeated."""

from __future__ import annotations

import asyncio

from deepagents.worker.quarantine import Quarantine

A, B, C = ("s", "1-0"), ("s", "2-0"), ("s", "3-0")


async def test_a_suspect_waits_for_ordinary_runs_and_holds_new_ones() -> None:
    q = Quarantine(drain_s=30)
    assert q.try_enter([A])
    events: list[str] = []

    async def suspect() -> None:
        async with q.alone():
            events.append("suspect runs")
            await asyncio.sleep(0)
            events.append("suspect done")

    running = asyncio.create_task(suspect())
    await asyncio.sleep(0)
    assert events == [], "A still runs: the suspect waits"
    assert not q.try_enter([B]), "nothing new starts while a suspect waits"
    blocked = asyncio.create_task(q.enter([B]))
    q.leave(A)
    await asyncio.wait_for(running, 5)  # woken by the leave, not by the 30 s bound
    await asyncio.wait_for(blocked, 5)
    assert events == ["suspect runs", "suspect done"]
    assert q.try_enter([C]), "after the suspect, ordinary deliveries go in at once"


async def test_suspects_run_one_at_a_time() -> None:
    q = Quarantine(drain_s=30)
    inside = 0
    most = 0

    async def suspect() -> None:
        nonlocal inside, most
        async with q.alone():
            inside += 1
            most = max(most, inside)
            await asyncio.sleep(0)
            inside -= 1

    await asyncio.gather(*(suspect() for _ in range(5)))
    assert most == 1


async def test_a_drain_that_gives_up_is_not_repeated() -> None:
    q = Quarantine(drain_s=0.05)
    assert q.try_enter([A])  # never leaves: a long task
    async with q.alone():  # waits drain_s, then lets A be
        pass
    # The next suspect does not wait for A again, however long the bound: it goes in
    # within a few turns of the loop, with no clock involved.
    q.drain_s = 3600
    second = asyncio.create_task(_alone(q))
    for _ in range(10):
        await asyncio.sleep(0)
    assert second.done(), "the second suspect waited for a run the first one let be"
    await second


async def _alone(q: Quarantine) -> None:
    async with q.alone():
        pass
