"""Shortening how long a finished task's records stay in Redis (its hash and location).

For tasks nobody will look up later, such as the gateway's health probes: at the usual
TTLs (a day for the hash, eight for the location), every probe would stay for a week.
"""

from __future__ import annotations

from redis.asyncio import Redis

from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams.errors import redis_errors


async def expire_task(
    client: Redis, keys: Keys, agent: str, shard: int, task_id: str, ttl_s: int
) -> None:
    """Both records expire ``ttl_s`` from now. Two commands, not a transaction: on a
    cluster the two keys live in different slots."""
    with redis_errors("expire task records"):
        pipe = client.pipeline(transaction=False)
        pipe.expire(keys.shard(agent, shard).task(task_id), ttl_s)
        pipe.expire(keys.location(task_id), ttl_s)
        await pipe.execute()
