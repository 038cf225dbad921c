"""The delayed pump waking due waits: one task whose records are damaged (its steps key
holds a string, so the wake script's HINCRBY fails) does not stop the waits behind it, and
loses nothing: a script is not rolled back, so the wake writes nothing before the command
that can fail, and that task's wait stays for the next turn."""

from __future__ import annotations

from redis.asyncio import Redis

from deepagents.contract.event_sink import event_sink
from deepagents.transport.base import StreamRef
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams.bus import RedisStreamBus
from deepagents.worker.asking import wake_due
from tests.support.parking import parked

TIERS = ("p0", "p2")


async def test_a_wait_that_cannot_wake_does_not_stop_the_others(client: Redis, prefix: str) -> None:
    bus = RedisStreamBus(client)
    try:
        await _two_waits_one_damaged(bus, client, prefix)
    finally:
        await bus.aclose()


async def _two_waits_one_damaged(bus: RedisStreamBus, client: Redis, prefix: str) -> None:
    keys = Keys(prefix).shard("echo", 0)
    ref = StreamRef(keys, "p2")
    await bus.ensure_group(ref, "echo")
    for task_id in ("t1", "t2"):
        await parked(bus, ref, task_id)
    await client.set(keys.steps("t1"), "not a hash")
    promoted = await bus.promote_due(keys, TIERS)
    assert sorted(promoted.waits) == ["t1", "t2"]
    woke = await wake_due(bus, keys, TIERS, promoted.waits, events=event_sink(False), metrics=None)
    assert woke == 1
    states = [await client.hget(keys.task(t), "state") for t in ("t1", "t2")]
    assert states == [b"waiting", b"queued"]
    # Nothing of t1 was written before the failure: its wait is tried again next turn.
    assert (await bus.promote_due(keys, TIERS)).waits == ("t1",)
