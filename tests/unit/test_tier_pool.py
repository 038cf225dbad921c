"""A tier's slots go to the readers in the order they asked: a reader that gives its slots
back and asks again at once (its shard's stream was empty) queues behind a reader already
waiting, so the one shard with a task queued gets a slot while the tier runs tasks."""

from __future__ import annotations

import asyncio

from deepagents.worker.pools import TierPool


async def _waiting(pool: TierPool, most: int) -> asyncio.Task[int]:
    task = asyncio.ensure_future(pool.take(most))
    await asyncio.sleep(0)  # it asked, found no slot and waits
    assert not task.done()
    return task


async def test_a_slot_given_back_goes_to_the_reader_already_waiting() -> None:
    pool = TierPool("p2", 2)
    assert await pool.take(2) == 2  # an idle shard's reader holds them while it blocks
    other = await _waiting(pool, 2)  # the reader of the shard with a task queued
    assert pool.waiting == 1

    async def idle_reader_reads_again() -> int:
        pool.release(2)  # its read came back empty
        return await pool.take(2)  # and it asks again at once

    again = asyncio.ensure_future(idle_reader_reads_again())
    assert await asyncio.wait_for(other, 5) == 2
    assert not again.done() and pool.waiting == 1  # it waits its turn now
    pool.release(2)
    assert await asyncio.wait_for(again, 5) == 2


async def test_slots_left_over_go_to_the_next_in_line() -> None:
    pool = TierPool("p2", 3)
    assert await pool.take(3) == 3
    first, second = await _waiting(pool, 1), await _waiting(pool, 5)
    pool.release(3)
    assert await asyncio.wait_for(first, 5) == 1
    assert await asyncio.wait_for(second, 5) == 2
    assert pool.free == 0


async def test_a_cancelled_reader_passes_its_turn_on() -> None:
    pool = TierPool("p2", 1)
    assert await pool.take(1) == 1
    told, next_ = await _waiting(pool, 1), await _waiting(pool, 1)
    pool.release(1)  # ``told`` is told a slot is free, and cancelled before it takes it
    told.cancel()
    assert await asyncio.wait_for(next_, 5) == 1
    assert told.cancelled()
    # cancelled while still in line: a release skips it
    gone, later = await _waiting(pool, 1), await _waiting(pool, 1)
    gone.cancel()
    pool.release(1)
    assert await asyncio.wait_for(later, 5) == 1
    assert gone.cancelled() and pool.free == 0
