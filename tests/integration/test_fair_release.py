"""A fair tier's read sends the release script and its read in one round trip: a server
that lost its scripts still gets the fair queue's tasks moved in and read in that call."""

from __future__ import annotations

import orjson
import pytest
from redis.asyncio import Redis

from deepagents.contract import Task
from deepagents.contract.codec import encode_task
from deepagents.transport.base import Enqueue, Fairness, StreamRef
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams.bus import RedisStreamBus


@pytest.mark.parametrize("cap", [0, 5])
async def test_a_fair_read_after_script_flush_moves_and_reads_in_one_call(
    client: Redis, prefix: str, cap: int
) -> None:
    bus = RedisStreamBus(client)
    ref = StreamRef(Keys(prefix).shard("echo", 0), "p2")
    await bus.ensure_group(ref, "echo")
    tasks = [Task(intent="echo", tenant=t) for t in "AAB"]
    admitted = await bus.enqueue_many(
        [Enqueue(ref, t.task_id, encode_task(t)) for t in tasks],
        max_backlog=100,
        fair=[Fairness(t.tenant or "", 1.0, cap) for t in tasks],
    )
    # The first went straight into the idle stream, the others wait in the fair queue.
    assert [bool(a.entry_id) for a in admitted] == [True, False, False]
    await client.script_flush()
    entries = await bus.read_fair(ref, "echo", "c1", 10, None, cap=cap)
    read = [orjson.loads((e.fields or {})[b"task"])["task_id"] for e in entries]
    assert sorted(read) == sorted(t.task_id for t in tasks)
    assert await bus.read_fair(ref, "echo", "c1", 10, None, cap=cap) == []
    await bus.aclose()
