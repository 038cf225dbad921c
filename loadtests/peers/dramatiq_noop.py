"""A no-op actor on Dramatiq's Redis broker (lists + a Lua dispatch script, acks)."""

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from stamp import record

dramatiq.set_broker(RedisBroker(url=os.environ["PEER_REDIS_URL"]))


@dramatiq.actor
def noop(i: int, t: int = 0) -> None:
    record(t)
