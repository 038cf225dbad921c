"""Wait on conditions with a timeout; never on fixed sleeps."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(
    check: Callable[[], Awaitable[T]],
    *,
    timeout: float = 30.0,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """Poll ``check`` until it returns a truthy value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"{what} not reached within {timeout} s (last value: {last!r})")


def eventually_sync(
    check: Callable[[], T],
    *,
    timeout: float = 30.0,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what} not reached within {timeout} s (last value: {last!r})")
