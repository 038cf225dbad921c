"""The group commit's backlog bound: a tier's readers wait while a poolful of its commits
is in the air, and only that tier's."""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis

from deepagents.transport.base import CommitItem, StreamRef
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams.bus import RedisStreamBus
from deepagents.worker.stream_commits import CommitBounds, Committer


async def test_backlog_bound_holds_a_tier_until_its_commits_land(
    client: Redis, prefix: str
) -> None:
    bus = RedisStreamBus(client)
    ref = StreamRef(Keys(prefix).shard("echo", 0), "p2")
    await bus.ensure_group(ref, "echo")
    landed: list[tuple[Any, str | None]] = []
    committer = Committer(
        bus,
        "echo",
        "c1",
        lambda tokens, statuses, _: landed.extend(zip(tokens, statuses, strict=True)),
        CommitBounds(backlog={"p0": 2, "p2": 2}),
    )
    for n in range(2):  # no such entries: each lands as "lost", which is enough here
        committer.put(ref, CommitItem(f"1-{n}", f"t{n}", b"{}", "", ()), n)

    waiting = asyncio.ensure_future(committer.room("p2"))
    await asyncio.wait_for(committer.room("p0"), 1)  # another tier reads on
    for _ in range(10):  # room() waits on an event only: unbounded, it would be done now
        await asyncio.sleep(0)
    assert not waiting.done()  # full: p2's readers wait

    running = asyncio.ensure_future(committer.run())
    await asyncio.wait_for(waiting, 10)  # the flush landed: room again
    assert sorted(landed) == [(0, "lost"), (1, "lost")]
    committer.close()
    await asyncio.wait_for(running, 10)
    await bus.aclose()
