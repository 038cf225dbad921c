"""``Deadlines``: one checker task bounds many awaits (the bus's round trips)."""

from __future__ import annotations

import asyncio

import pytest

from deepagents._internal.deadlines import Deadlines


async def _bounded(
    deadlines: Deadlines,
    limit_s: float,
    waited: asyncio.Event,
    started: asyncio.Event | None = None,
) -> str:
    """What ``Lanes._exchange`` does around a round trip; ``started`` is set once bounded."""
    task = deadlines.start(limit_s)
    if started is not None:
        started.set()
    try:
        await waited.wait()
    except asyncio.CancelledError:
        if deadlines.expired(task):
            return "timed out"
        raise
    finally:
        deadlines.end(task)
    return "done"


async def test_an_await_past_its_limit_times_out_and_its_task_goes_on() -> None:
    deadlines = Deadlines()

    async def caller() -> tuple[str, int]:
        outcome = await _bounded(deadlines, 0.2, asyncio.Event())
        current = asyncio.current_task()
        assert current is not None
        # The limit's cancellation was taken back: an asyncio.timeout later in this task
        # (or a TaskGroup) would otherwise take a cancellation for its own.
        return outcome, current.cancelling()

    try:
        assert await asyncio.wait_for(caller(), 10) == ("timed out", 0)
    finally:
        await deadlines.aclose()


async def test_an_await_that_ends_in_time_is_left_alone() -> None:
    deadlines = Deadlines()
    waited, started = asyncio.Event(), asyncio.Event()
    try:
        running = asyncio.create_task(_bounded(deadlines, 5.0, waited, started))
        await asyncio.wait_for(started.wait(), 10)
        waited.set()
        assert await asyncio.wait_for(running, 10) == "done"
    finally:
        await deadlines.aclose()


async def test_a_cancellation_from_outside_is_not_taken_for_a_timeout() -> None:
    deadlines = Deadlines()
    started = asyncio.Event()
    try:
        running = asyncio.create_task(_bounded(deadlines, 30.0, asyncio.Event(), started))
        await asyncio.wait_for(started.wait(), 10)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
    finally:
        await deadlines.aclose()


def test_each_event_loop_gets_its_own_checker() -> None:
    """A bus outlives ``asyncio.run`` in some callers' code: the next loop is bounded too."""
    deadlines = Deadlines()

    async def once() -> str:
        return await asyncio.wait_for(_bounded(deadlines, 0.2, asyncio.Event()), 10)

    assert asyncio.run(once()) == "timed out"
    assert asyncio.run(once()) == "timed out"


async def test_aclose_stops_the_checker() -> None:
    deadlines = Deadlines()
    waited, started = asyncio.Event(), asyncio.Event()
    running = asyncio.create_task(_bounded(deadlines, 5.0, waited, started))
    await asyncio.wait_for(started.wait(), 10)
    checker = deadlines._checker
    assert checker is not None and not checker.done()
    waited.set()
    await running
    await deadlines.aclose()
    assert checker.done()
