"""A no-op task on taskiq's Redis Streams broker (consumer group, XACK after the task)."""

import os

from stamp import record
from taskiq_redis import RedisStreamBroker

# "0": the group reads the entries enqueued before the worker started ("$" would skip them).
broker = RedisStreamBroker(os.environ["PEER_REDIS_URL"], consumer_id="0")


@broker.task
async def noop(i: int, t: int = 0) -> None:
    record(t)
