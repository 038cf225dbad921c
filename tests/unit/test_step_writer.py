"""The step writer sends the records of every delivery in flight together: the records asked
for in one turn of the loop go in one round trip, those asked for while it is in the air go
in the next, and a failure reaches every step that waited on that batch."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from deepagents.errors import TransportError
from deepagents.transport.base import StepRecord, StreamRef
from deepagents.transport.keys import Keys
from deepagents.transport.memory import MemoryBus
from deepagents.worker.step_writer import StepWriter

REF = StreamRef(Keys("t").shard("a", 0), "p2")


class SlowBus(MemoryBus):
    """A MemoryBus whose record_steps takes a while, as a round trip does, and says so."""

    def __init__(self, failures: int = 0) -> None:
        super().__init__()
        self.batches: list[int] = []
        self.failures = failures  # the first this many batches fail

    async def record_steps(
        self, group: str, consumer: str, items: Sequence[tuple[StreamRef, StepRecord]]
    ) -> list[str]:
        self.batches.append(len(items))
        await asyncio.sleep(0.05)
        if len(self.batches) <= self.failures:
            raise TransportError("connection reset")
        return await super().record_steps(group, consumer, items)


def _item(n: int) -> StepRecord:
    return StepRecord(f"0-{n}", f"t{n}", [("step:a", b"1")])


async def test_records_of_one_turn_share_a_batch_and_later_ones_the_next() -> None:
    bus = SlowBus()
    writer = StepWriter(bus, "a", "c1")
    first = [writer.write(REF, _item(n)) for n in range(50)]
    await asyncio.sleep(0.01)  # the first batch is in the air now
    second = [writer.write(REF, _item(n)) for n in range(50, 60)]
    statuses = await asyncio.gather(*first, *second)
    assert bus.batches == [50, 10]
    assert statuses == ["lost"] * 60  # no such entries: every record owner-checked alone


async def test_a_failed_batch_fails_every_step_that_waited_on_it_and_the_next_goes_on() -> None:
    bus = SlowBus(failures=1)
    writer = StepWriter(bus, "a", "c1")
    futures = [writer.write(REF, _item(n)) for n in range(3)]
    for future in futures:
        with pytest.raises(TransportError):
            await future
    assert await writer.write(REF, _item(9)) == "lost"
    assert bus.batches == [3, 1]
