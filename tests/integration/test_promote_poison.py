"""The promote script on a delayed set mixing due retries with members that are not
delayed tasks: each good one reaches its tier's stream, each bad one the dead-letter stream
with reason ``decode_error`` and the member as it was, in one call; nothing is left."""

from __future__ import annotations

import orjson
from redis.asyncio import Redis

from deepagents.transport.base import Promoted
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams.bus import RedisStreamBus

TIERS = ("p0", "p1", "p2")
BAD = {
    b"not json": "not JSON",
    b'"a string"': "not a JSON object",
    b'{"tier": "p0"}': "no task string",
    b'{"task": "{}", "attempt": 0}': "attempt is not an integer >= 1",
    b'{"task": "{}", "attempt": 1.5}': "attempt is not an integer >= 1",
    b'{"task": "{}", "attempt": 1, "reply": 7}': "reply is not a string",
}


def _member(tier: str | None, n: int, reply: object = "") -> bytes:
    return orjson.dumps({"tier": tier, "task": f'{{"n":{n}}}', "attempt": 2, "reply": reply})


async def _entries(client: Redis, key: str) -> list[dict[bytes, bytes]]:
    raw: list[tuple[bytes, dict[bytes, bytes]]] = await client.xrange(key)  # type: ignore[assignment]
    return [fields for _, fields in raw]


async def test_bad_members_are_dead_lettered_and_the_good_ones_promoted(
    client: Redis, prefix: str
) -> None:
    keys = Keys(prefix).shard("echo", 0)
    good = {
        _member("p0", 0): "p0",
        _member("p1", 1, reply=None): "p1",  # null: no reply channel
        _member("nosuch", 2): "p2",  # an unknown tier: the last one
    }
    await client.zadd(keys.delayed, {**dict.fromkeys(BAD, 0), **dict.fromkeys(good, 1)})
    bus = RedisStreamBus(client)
    try:
        assert await bus.promote_due(keys, TIERS) == Promoted(len(good), len(BAD))
    finally:
        await bus.aclose()
    assert await client.zcard(keys.delayed) == 0
    for member, tier in good.items():
        (entry,) = await _entries(client, keys.stream(tier))
        sent = orjson.loads(member)
        assert entry[b"task"] == sent["task"].encode() and entry[b"attempt"] == b"2"
        assert entry[b"reply"] == (sent["reply"] or "").encode()
    letters = {f[b"orig_member"]: f for f in await _entries(client, keys.dlq)}
    assert set(letters) == set(BAD)
    for member, error in BAD.items():
        assert letters[member][b"reason"] == b"decode_error"
        assert letters[member][b"source"] == keys.delayed.encode()
        assert letters[member][b"error"].decode().startswith(error)
