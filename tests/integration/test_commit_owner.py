"""The commit's owner check is per entry: one lost entry does not sink its batch."""

from __future__ import annotations

from redis.asyncio import Redis

from deepagents.transport.base import BeginItem, CommitItem, StreamRef
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams.bus import RedisStreamBus
from tests.support.replies import Fields

FIELDS: Fields = {"task": b"{}", "attempt": 1, "enq": 0, "reply": ""}


async def _held(client: Redis, prefix: str, ids: list[str]) -> tuple[RedisStreamBus, StreamRef]:
    """Entries with these ids, read and begun by consumer c1."""
    bus = RedisStreamBus(client)
    ref = StreamRef(Keys(prefix).shard("echo", 0), "p2")
    await bus.ensure_group(ref, "echo")
    for entry_id in ids:
        await client.xadd(ref.name, FIELDS, id=entry_id)
    read = await bus.read(ref, "echo", "c1", len(ids), None)
    assert [e.entry_id for e in read] == ids
    items = [BeginItem(entry_id, f"t{entry_id}", 1) for entry_id in ids]
    assert {b.status for b in await bus.begin(ref, "echo", "c1", items, fresh=True)} == {"ok"}
    return bus, ref


def _items(ids: list[str]) -> list[CommitItem]:
    return [CommitItem(entry_id, f"t{entry_id}", b"{}", "", ()) for entry_id in ids]


async def test_an_entry_another_consumer_claimed_is_lost_and_the_rest_commit(
    client: Redis, prefix: str
) -> None:
    ids = ["5-8", "5-9", "5-10", "6-1"]
    bus, ref = await _held(client, prefix, ids)
    await client.xclaim(ref.name, "echo", "c2", 0, ["5-9"])
    assert await bus.commit(ref, "echo", "c1", _items(ids)) == ["ok", "lost", "ok", "ok"]
    assert await client.hget(ref.keys.task("t5-9"), "state") == b"running"
    pending = await client.xpending_range(ref.name, "echo", min="-", max="+", count=10)
    assert [(p["message_id"], p["consumer"]) for p in pending] == [(b"5-9", b"c2")]
    await bus.aclose()
