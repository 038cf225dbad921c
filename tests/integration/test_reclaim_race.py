"""Two reclaimers race for the same stale entries (RELIABILITY.md row 11): each entry goes
to exactly one of them, and all of them to one or the other."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from deepagents.transport.base import RECLAIM_START, StreamRef
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams.bus import RedisStreamBus
from tests.support.wait import eventually

ENTRIES = 400
IDLE_MS = 1000  # the visibility timeout of this test


async def test_each_stale_entry_is_claimed_by_exactly_one_reclaimer(
    client: Redis, prefix: str
) -> None:
    ref = StreamRef(Keys(prefix).shard("echo", 0), "p2")
    buses = [RedisStreamBus(client), RedisStreamBus(client)]
    try:
        await buses[0].ensure_group(ref, "echo")
        pipe = client.pipeline(transaction=False)
        for i in range(ENTRIES):
            pipe.xadd(ref.name, {"task": b"{}", "attempt": 1, "enq": 0, "i": i})
        await pipe.execute()
        await client.xreadgroup("echo", "dead", {ref.name: ">"}, count=ENTRIES)

        async def stale() -> bool:
            newest = await client.xpending_range(ref.name, "echo", "-", "+", 1, "dead")
            return bool(newest) and int(newest[0]["time_since_delivered"]) > IDLE_MS

        await eventually(stale, timeout=10, interval=0.05, what="the dead consumer's entries stale")

        async def reclaim(bus: RedisStreamBus, name: str) -> list[str]:
            got: list[str] = []
            cursor = RECLAIM_START
            while True:  # small pages, so the two interleave over many round trips
                claimed = await bus.claim_stale(ref, "echo", name, IDLE_MS, 10, cursor)
                got += [e.entry_id for e in claimed.entries]
                cursor = claimed.cursor
                if cursor.at_start:
                    return got

        a, b = await asyncio.gather(reclaim(buses[0], "a"), reclaim(buses[1], "b"))
    finally:
        for bus in buses:
            await bus.aclose()
    # Claiming resets an entry's idle time: within one visibility timeout, the other
    # reclaimer cannot take it again. So no entry is claimed twice, and none is left.
    assert not set(a) & set(b), "an entry claimed by both"
    assert sorted(a + b) == sorted(set(a + b)) and len(a) + len(b) == ENTRIES
    assert a and b, "both reclaimers took part"
