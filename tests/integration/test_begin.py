"""The begin script: duplicates are skipped, deliveries counted, owners checked unless the
batch was just read by this consumer, and the commit fences a stale begin either way."""

from __future__ import annotations

import orjson
from redis.asyncio import Redis

from deepagents.contract.events import AuditEvent
from deepagents.transport.base import BeginItem, Begun, CommitItem, StreamRef
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams.bus import RedisStreamBus
from tests.support.replies import as_bytes, entries


async def _setup(client: Redis, prefix: str) -> tuple[RedisStreamBus, StreamRef, str]:
    bus = RedisStreamBus(client)
    ref = StreamRef(Keys(prefix).shard("echo", 0), "p2")
    await bus.ensure_group(ref, "echo")
    entry_id = as_bytes(
        await client.xadd(ref.name, {"task": b"{}", "attempt": 1, "enq": 0, "reply": ""})
    ).decode()
    return bus, ref, entry_id


async def test_stale_fresh_begin_runs_in_vain_and_cannot_commit(client: Redis, prefix: str) -> None:
    """A worker stalls between its read and its begin; another claims the entry meanwhile.
    The stalled one's fresh begin is not owner-checked, but its commit is: one result."""
    bus, ref, entry_id = await _setup(client, prefix)
    item = BeginItem(entry_id, "t1", 1)
    (read,) = await bus.read(ref, "echo", "a", 10, None)
    assert read.entry_id == entry_id
    await client.xautoclaim(ref.name, "echo", "b", 0, "0-0")  # b takes it over

    (stale,) = await bus.begin(ref, "echo", "a", [item], fresh=True)
    assert stale.status == "ok"
    (claimed,) = await bus.begin(ref, "echo", "b", [item])
    assert (claimed.status, claimed.deliveries, claimed.stepped) == ("ok", 2, False)
    # the second delivery learns when the task first began: its latency runs from there
    first = await client.hget(ref.keys.task("t1"), "first_ms")
    assert first is not None and claimed.first_ms == int(first) > 0

    assert await bus.commit(ref, "echo", "a", [CommitItem(entry_id, "t1", b"a", "", ())]) == [
        "lost"
    ]
    assert await bus.commit(ref, "echo", "b", [CommitItem(entry_id, "t1", b"b", "", ())]) == ["ok"]
    task = await client.hgetall(ref.keys.task("t1"))
    assert (task[b"result"], task[b"owner"], task[b"state"]) == (b"b", b"b", b"done")
    await bus.aclose()


async def test_claimed_begin_checks_the_owner(client: Redis, prefix: str) -> None:
    bus, ref, entry_id = await _setup(client, prefix)
    item = BeginItem(entry_id, "t1", 1)
    await bus.read(ref, "echo", "a", 10, None)
    assert _head(await bus.begin(ref, "echo", "b", [item])) == [("lost", 0, False)]
    assert _head(await bus.begin(ref, "echo", "a", [item])) == [("ok", 1, False)]
    assert _head(await bus.begin(ref, "echo", "a", [item])) == [
        ("ok", 2, False)
    ]  # a restart's re-read
    await client.xack(ref.name, "echo", entry_id)
    assert _head(await bus.begin(ref, "echo", "a", [item])) == [("gone", 0, False)]
    await bus.aclose()


async def test_fresh_begin_of_a_finished_task_is_a_duplicate(client: Redis, prefix: str) -> None:
    bus, ref, entry_id = await _setup(client, prefix)
    await client.hset(ref.keys.task("t1"), mapping={"state": "done", "result": "r"})
    await bus.read(ref, "echo", "a", 10, None)
    assert _head(await bus.begin(ref, "echo", "a", [BeginItem(entry_id, "t1", 1)], fresh=True)) == [
        ("dup", 0, False)
    ]
    assert await client.xlen(ref.name) == 0
    assert (await client.xpending(ref.name, "echo"))["pending"] == 0
    assert await client.hget(ref.keys.task("t1"), "result") == b"r"
    await bus.aclose()


def _started(task_id: str) -> AuditEvent:
    """A started event as the worker passes it: without its delivery count."""
    return AuditEvent.of("started", task_id)


async def _outbox(client: Redis, ref: StreamRef) -> list[dict[str, object]]:
    return [
        event
        for _, fields in await entries(client, ref.keys.outbox)
        for event in orjson.loads(fields[b"events"])
    ]


async def test_each_delivery_records_its_start_and_count_at_begin(
    client: Redis, prefix: str
) -> None:
    bus, ref, entry_id = await _setup(client, prefix)
    started = _started("t1")
    item = BeginItem(entry_id, "t1", 1, started)
    await bus.read(ref, "echo", "a", 10, None)
    assert _head(await bus.begin(ref, "echo", "a", [item], fresh=True)) == [("ok", 1, False)]
    await client.xautoclaim(ref.name, "echo", "b", 0, "0-0")  # a dies; b reclaims
    assert _head(await bus.begin(ref, "echo", "b", [item])) == [("ok", 2, False)]
    assert _head(await bus.begin(ref, "echo", "a", [item])) == [("lost", 0, False)]  # no event
    expected = orjson.loads(orjson.dumps(started.as_object()))
    assert await _outbox(client, ref) == [
        {**expected, "deliveries": 1},
        {**expected, "deliveries": 2},
    ]
    await client.hset(ref.keys.task("t1"), "state", "done")
    assert _head(await bus.begin(ref, "echo", "b", [item])) == [
        ("dup", 0, False)
    ]  # no event either
    assert len(await _outbox(client, ref)) == 2
    await bus.aclose()


def _head(begun: list[Begun]) -> list[tuple[str, int, bool]]:
    """Status, deliveries and stepped of each (a redelivery's first start and spend are
    asserted on their own)."""
    return [(b.status, b.deliveries, b.stepped) for b in begun]
