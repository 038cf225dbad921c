"""GroupCommit: a lone caller is sent at once; callers that arrive while a batch is on the
wire go together in the next one; every caller gets exactly its own outcome."""

from __future__ import annotations

import asyncio

import pytest

from deepagents._internal.group_commit import GroupCommit


class Wire:
    """A ``send`` that records its batches and holds each until released."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.release = asyncio.Event()

    async def send(self, batch: list[int]) -> list[int | BaseException]:
        self.batches.append(batch)
        await self.release.wait()
        return [ValueError(f"odd {i}") if i % 2 else i * 10 for i in batch]


async def test_a_lone_caller_is_sent_at_once_and_the_rest_go_together() -> None:
    wire = Wire()
    group: GroupCommit[int, int] = GroupCommit(wire.send, name="test")
    first = asyncio.create_task(group(0))
    await asyncio.sleep(0)
    assert wire.batches == [[0]]  # on the wire before anyone else came: no timer, no wait
    rest = [asyncio.create_task(group(i)) for i in (2, 4, 6)]
    await asyncio.sleep(0)
    assert wire.batches == [[0]]  # queued behind the batch on the wire
    wire.release.set()
    assert await first == 0
    assert await asyncio.gather(*rest) == [20, 40, 60]
    assert wire.batches == [[0], [2, 4, 6]]


async def test_each_caller_gets_its_own_error() -> None:
    wire = Wire()
    wire.release.set()
    group: GroupCommit[int, int] = GroupCommit(wire.send, name="test")
    outcomes = await asyncio.gather(*(group(i) for i in range(4)), return_exceptions=True)
    assert outcomes[0] == 0 and outcomes[2] == 20
    assert [str(o) for o in outcomes[1::2]] == ["odd 1", "odd 3"]


async def test_a_failed_round_trip_fails_every_caller_of_its_batch() -> None:
    async def broken(batch: list[int]) -> list[int | BaseException]:
        await asyncio.sleep(0)
        raise ConnectionError("gone")

    group: GroupCommit[int, int] = GroupCommit(broken, name="test")
    outcomes = await asyncio.gather(*(group(i) for i in range(3)), return_exceptions=True)
    assert all(isinstance(o, ConnectionError) for o in outcomes)
    with pytest.raises(ConnectionError):
        await group(9)  # and the next one is sent again, alone
