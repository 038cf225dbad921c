"""A task parked under a rollout names the version it was read from on its hash; a reply
re-enqueues it on that version's streams. A task parked by an older release names the
version in the field ``lane``: after an upgrade its reply must still find that version."""

from __future__ import annotations

import orjson
import pytest
from redis.asyncio import Redis

from deepagents.contract.event_sink import event_sink
from deepagents.orchestrator.replies import Replies
from deepagents.store.tasks import Location, TaskStore
from deepagents.transport.base import StreamRef
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams.bus import RedisStreamBus
from tests.support.parking import parked

TIERS = ["p0", "p2"]


@pytest.mark.parametrize("written_by", ["this release", "an older release"])
async def test_a_reply_resumes_the_task_on_the_version_it_was_parked_from(
    client: Redis, prefix: str, written_by: str
) -> None:
    keys = Keys(prefix)
    canary = StreamRef(keys.shard("echo", 0, "1.3.0"), "p2")
    unversioned = StreamRef(keys.shard("echo", 0), "p2")
    bus, tasks = RedisStreamBus(client), TaskStore(client, keys)
    try:
        for ref in (canary, unversioned):
            await bus.ensure_group(ref, "echo")
        await bus.set_many([tasks.location_record("t1", Location("echo", 0, "p2"))], 60, what="t")
        await parked(bus, canary, "t1")
        task_key = canary.keys.task("t1")
        assert await client.hget(task_key, "parked_version") == b"1.3.0"
        if written_by == "an older release":
            await client.hdel(task_key, "parked_version")
            await client.hset(task_key, "lane", "1.3.0")

        replies = Replies(
            bus, tasks, keys, events=event_sink(False), metrics=None, max_answer_bytes=999
        )
        await replies.reply("t1", {"ok": True}, TIERS)
        assert await bus.read(unversioned, "echo", "c2", 10, None) == []
        (again,) = await bus.read(canary, "echo", "c2", 10, None)
        assert again.fields is not None
        assert orjson.loads(again.fields[b"task"])["task_id"] == "t1"
    finally:
        await bus.aclose()
