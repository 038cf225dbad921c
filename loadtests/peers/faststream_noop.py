"""A no-op subscriber on FastStream's Redis Streams (consumer group, ack after the handler):
``faststream run faststream_noop:app``."""

import os

from faststream import FastStream
from faststream.redis import RedisBroker, StreamSub
from stamp import record

broker = RedisBroker(os.environ["PEER_REDIS_URL"])
app = FastStream(broker)
# last_id "0": the group reads the entries enqueued before the worker started.
STREAM = StreamSub("faststream", group="faststream", consumer="c1", last_id="0")


@broker.subscriber(stream=STREAM)
async def noop(body: dict[str, int]) -> None:
    record(body.get("t", 0))
