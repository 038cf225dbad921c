"""A tenant's waiting index (``ShardKeys.tenant_waiting``) is written by park alone: answer,
wake and cancel leave their member. Each park drops the oldest members the shard's index no
longer holds, so a tenant whose questions are answered through the API, and never listed,
does not grow its index with every question it was ever asked."""

from __future__ import annotations

from redis.asyncio import Redis

from deepagents.transport.base import StreamRef, now_ms
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams.bus import RedisStreamBus
from tests.support.parking import parked

TIERS = ("p0", "p2")


async def test_answered_questions_leave_the_tenant_index_as_others_are_asked(
    client: Redis, prefix: str
) -> None:
    bus = RedisStreamBus(client)
    keys = Keys(prefix).shard("echo", 0)
    ref = StreamRef(keys, "p2")
    try:
        await bus.ensure_group(ref, "echo")
        later = now_ms() + 60_000
        await parked(bus, ref, "old", tenant="acme", due_ms=later)  # waits throughout
        for i in range(30):
            await parked(bus, ref, f"t{i}", tenant="acme", due_ms=later)
            answered = await bus.answer(keys, TIERS, f"t{i}", "1", b"{}", ())
            assert answered.status == "ok"
            await bus.read(ref, "echo", "c1", 1, None)  # the resumed entry, out of the way
        assert await client.zcard(keys.tenant_waiting("acme")) <= 4
        assert [w.task_id for w in await bus.waiting(keys, 10, "acme")] == ["old"]
    finally:
        await bus.aclose()
