"""A capped fair tier's read, as every backend does it: release, read, and while tasks
wait for a slot or hold one, block briefly and release again until ``block_ms`` passed."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from deepagents.transport.base import RawEntry

# A capped fair tier's reader, while tasks wait for a slot or hold one, blocks this long at
# most: a slot that frees adds no entry to wake it. It bounds how late a freed slot is used
# by an otherwise idle reader, and costs such a reader a release per period.
CAPPED_POLL_MS = 50


async def read_while_busy(
    release: Callable[[], Awaitable[tuple[list[RawEntry], bool]]],
    read: Callable[[int | None], Awaitable[list[RawEntry]]],
    block_ms: int | None,
) -> list[RawEntry]:
    """``release`` moves what may go in and reads without blocking: (entries, busy), busy
    while a task waits for a slot or holds one. ``read`` blocks on the stream for the ms
    given. Nothing busy: one blocking read, as an uncapped tier's."""
    until = None if not block_ms else time.monotonic() + block_ms / 1000
    while True:
        entries, busy = await release()
        if entries or block_ms is None:
            return entries
        if not busy:
            return await read(block_ms)
        wait = CAPPED_POLL_MS
        if until is not None:
            left = int((until - time.monotonic()) * 1000)
            if left <= 0:
                return []
            wait = min(wait, left)
        entries = await read(wait)
        if entries:
            return entries
