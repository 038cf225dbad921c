"""A worker's step records go through a group commit sent from its own task
(``worker/steps.py``'s ``step_records``, as the worker builds it): the records asked for in one
turn of the loop go in one round trip, those asked for while it is in the air go in the
next, a failure reaches every step that waited on that batch, and a step cancelled while
its record is on the wire does not cancel the round trip."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from deepagents.errors import TransportError
from deepagents.transport.base import StepRecord, StreamRef
from deepagents.transport.keys import Keys
from deepagents.transport.memory import MemoryBus
from deepagents.transport.states import Outcome
from deepagents.worker.steps import step_records

REF = StreamRef(Keys("t").shard("a", 0), "p2")


class GatedBus(MemoryBus):
    """A MemoryBus whose record_steps stays on the wire until the test opens the gate, and
    says what it was sent."""

    def __init__(self, failures: int = 0, *, open_: bool = False) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        if open_:
            self.gate.set()
        self.batches: list[int] = []
        self.landed: list[str] = []  # the task ids of the records whose round trip ended
        self.failures = failures  # the first this many batches fail

    async def record_steps(
        self, group: str, consumer: str, items: Sequence[tuple[StreamRef, StepRecord]]
    ) -> list[Outcome]:
        self.batches.append(len(items))
        await self.gate.wait()
        if len(self.batches) <= self.failures:
            raise TransportError("connection reset")
        statuses = await super().record_steps(group, consumer, items)
        self.landed += [record.task_id for _, record in items]
        return statuses


def _item(n: int) -> tuple[StreamRef, StepRecord]:
    return REF, StepRecord(f"0-{n}", f"t{n}", [("step:a", b"1")])


async def _on_the_wire(bus: GatedBus, batches: int) -> None:
    while len(bus.batches) < batches:
        await asyncio.sleep(0)


async def test_records_of_one_turn_share_a_batch_and_later_ones_the_next() -> None:
    bus = GatedBus()
    writer = step_records(bus, "a", "c1")
    first = [asyncio.ensure_future(writer(_item(n))) for n in range(50)]
    await _on_the_wire(bus, 1)
    second = [asyncio.ensure_future(writer(_item(n))) for n in range(50, 60)]
    bus.gate.set()
    statuses = await asyncio.gather(*first, *second)
    assert bus.batches == [50, 10]
    assert statuses == ["lost"] * 60  # no such entries: every record owner-checked alone


async def test_a_failed_batch_fails_every_step_that_waited_on_it_and_the_next_goes_on() -> None:
    bus = GatedBus(failures=1, open_=True)
    writer = step_records(bus, "a", "c1")
    futures = [asyncio.ensure_future(writer(_item(n))) for n in range(3)]
    for future in futures:
        with pytest.raises(TransportError):
            await future
    assert await writer(_item(9)) == "lost"
    assert bus.batches == [3, 1]


async def test_a_lone_step_cancelled_while_its_record_is_on_the_wire_still_lands_it() -> None:
    bus = GatedBus()
    writer = step_records(bus, "a", "c1")
    step = asyncio.ensure_future(writer(_item(1)))
    await _on_the_wire(bus, 1)
    step.cancel()
    with pytest.raises(asyncio.CancelledError):
        await step
    again = asyncio.ensure_future(writer(_item(2)))  # queued behind the first
    bus.gate.set()
    assert await again == "lost"
    assert bus.landed == ["t1", "t2"], "the cancelled step's round trip was not cancelled"
