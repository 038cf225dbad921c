"""``_internal/eager.py``: a coroutine started in the current task and, when it waits,
finished there as a Task would run it: in its own context, its timeouts and cancellations
those of the task it started in."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest

from deepagents._internal.eager import Resume, first_step

var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")


async def run_eagerly(coro: Any) -> Any:
    context = contextvars.copy_context()
    finished, value = first_step(coro, context)
    if finished:
        return value
    return await Resume(coro, context, value)


async def test_a_coroutine_that_never_waits_finishes_in_its_first_step() -> None:
    async def quick() -> int:
        var.set("quick")
        return 7

    finished, value = first_step(quick(), contextvars.copy_context())
    assert (finished, value) == (True, 7)
    assert var.get() == "unset"  # set in its own context, not the caller's


async def test_one_that_waits_keeps_its_context_and_returns_its_value() -> None:
    async def slow() -> tuple[str, str]:
        var.set("slow")
        before = var.get()
        await asyncio.sleep(0.01)
        await asyncio.sleep(0)  # a bare yield too
        return before, var.get()

    assert await run_eagerly(slow()) == ("slow", "slow")
    assert var.get() == "unset"


async def test_an_error_after_waiting_comes_out_of_the_await() -> None:
    async def failing() -> None:
        await asyncio.sleep(0)
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await run_eagerly(failing())


async def test_cancelling_the_task_reaches_the_coroutine() -> None:
    seen: list[str] = []
    started = asyncio.Event()

    async def waits() -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return "never"

    task = asyncio.create_task(run_eagerly(waits()))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"]


async def test_a_timeout_entered_in_the_first_step_fires_in_the_task_it_started_in() -> None:
    async def bounded() -> str:
        try:
            async with asyncio.timeout(0.01):
                await asyncio.Event().wait()
        except TimeoutError:
            return "timed out"
        return "never"

    task = asyncio.create_task(run_eagerly(bounded()))
    assert await asyncio.wait_for(task, 10) == "timed out"
    assert not task.cancelled() and task.cancelling() == 0  # the timeout took its cancel back


async def test_closing_the_awaitable_closes_the_coroutine() -> None:
    closed: list[bool] = []

    async def waits() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            closed.append(True)

    coro = waits()
    context = contextvars.copy_context()
    finished, yielded = first_step(coro, context)
    assert not finished
    driver = Resume(coro, context, yielded).__await__()
    next(driver)  # hands the future on, as to a task
    driver.close()
    assert closed == [True]
