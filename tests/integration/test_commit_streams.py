"""Group commit of several shards' streams in one round trip: each stream's script call keeps
its owner checks and answers for its own entries."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from deepagents.errors import TransportError
from deepagents.transport.base import BeginItem, CommitItem, StreamRef
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams.bus import RedisStreamBus


async def _one_begun(bus: RedisStreamBus, client: Redis, ref: StreamRef, task_id: str) -> str:
    await bus.ensure_group(ref, "echo")
    await client.xadd(ref.name, {"task": b"{}", "attempt": 1, "enq": 0, "reply": ""})
    (entry,) = await bus.read(ref, "echo", "c1", 10, None)
    (begun,) = await bus.begin(ref, "echo", "c1", [BeginItem(entry.entry_id, task_id, 1)])
    assert begun.status == "ok"
    return entry.entry_id


async def test_commit_streams_commits_each_stream_with_owner_checks(
    client: Redis, prefix: str
) -> None:
    bus = RedisStreamBus(client)
    keys = Keys(prefix)
    refs = [StreamRef(keys.shard("echo", shard), "p2") for shard in (0, 1)]
    batches = []
    for n, ref in enumerate(refs):
        entry_id = await _one_begun(bus, client, ref, f"task-{n}")
        batches.append((ref, [CommitItem(entry_id, f"task-{n}", b'{"n":1}', "", ())]))

    # Another consumer does not own the entries: nothing is committed.
    assert await bus.commit_streams("echo", "c2", batches) == [["lost"], ["lost"]]
    assert await bus.commit_streams("echo", "c1", batches) == [["ok"], ["ok"]]
    # A retry after an ambiguous failure answers ok again.
    assert await bus.commit_streams("echo", "c1", batches) == [["ok"], ["ok"]]
    for n, ref in enumerate(refs):
        assert await client.hget(ref.keys.task(f"task-{n}"), "state") == b"done"
        assert await client.xlen(ref.name) == 0
    await bus.aclose()


async def test_hot_path_survives_script_flush_and_killed_connections(
    client: Redis, prefix: str
) -> None:
    """Read, begin and commit run on the bus's own connections: a server that lost its
    scripts gets them again, and a connection killed between calls is replaced, not
    reused (its replies would be out of step)."""
    bus = RedisStreamBus(client)
    ref = StreamRef(Keys(prefix).shard("echo", 0), "p2")
    first = await _one_begun(bus, client, ref, "task-a")
    await client.script_flush()
    lane_id = await bus.lanes.call("CLIENT", "ID")  # the one idle lane connection
    assert await client.client_kill_filter(_id=lane_id) == 1
    items = [CommitItem(first, "task-a", b'{"n":1}', "", ())]
    with pytest.raises(TransportError):
        await bus.commit(ref, "echo", "c1", items)  # its connection was killed
    assert await bus.commit(ref, "echo", "c1", items) == ["ok"]  # new connection, script loaded
    second = await _one_begun(bus, client, ref, "task-b")  # begin after SCRIPT FLUSH too
    assert await client.hget(ref.keys.task("task-b"), "state") == b"running"
    assert second != first
    await bus.aclose()
