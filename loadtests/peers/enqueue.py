"""Enqueue tasks for a peer with its normal API, one call per task, run in the peers' venv:

    enqueue.py taskiq|dramatiq|faststream|bare N [RATE]

Without RATE: as fast as one producer goes, then prints ``{"enqueue_per_s": ...}``. With
RATE: paced at RATE tasks/s, each stamped with the wall clock just before its call
(``stamp.py``)."""

import asyncio
import json
import sys
import time


def paced(n: int, rate: float):  # type: ignore[no-untyped-def]
    """Yields (i, stamp ns) at ``rate`` per second (stamp 0 when not paced)."""
    start = time.perf_counter()
    for i in range(n):
        if rate:
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            yield i, time.time_ns()
        else:
            yield i, 0


async def apaced(n: int, rate: float):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    for i in range(n):
        if rate:
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            yield i, time.time_ns()
        else:
            yield i, 0


async def taskiq(n: int, rate: float) -> None:
    from taskiq_noop import broker, noop

    await broker.startup()  # creates the consumer group
    async for i, t in apaced(n, rate):
        await noop.kiq(i, t)
    await broker.shutdown()


def dramatiq(n: int, rate: float) -> None:
    from dramatiq_noop import noop

    for i, t in paced(n, rate):
        noop.send(i, t)


async def faststream(n: int, rate: float) -> None:
    from faststream_noop import broker

    async with broker:
        async for i, t in apaced(n, rate):
            await broker.publish({"i": i, "t": t}, stream="faststream")


async def bare(n: int, rate: float) -> None:
    import os

    from redis.asyncio import Redis

    client = Redis.from_url(os.environ["PEER_REDIS_URL"])
    async for i, t in apaced(n, rate):
        await client.xadd("bare", {"task": json.dumps({"i": i, "t": t})})
    await client.aclose()


if __name__ == "__main__":
    peer, count = sys.argv[1], int(sys.argv[2])
    rate = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    started = time.perf_counter()
    if peer == "dramatiq":
        dramatiq(count, rate)
    else:
        asyncio.run({"taskiq": taskiq, "faststream": faststream, "bare": bare}[peer](count, rate))
    print(json.dumps({"enqueue_per_s": round(count / (time.perf_counter() - started))}))
