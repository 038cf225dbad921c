"""Enqueue tasks for a peer with its normal API, one call per task, run in the peers' venv:

    enqueue.py taskiq|dramatiq|faststream|bare|arq|celery N [RATE|wallclock]

Without RATE: as fast as one producer goes, then prints ``{"enqueue_per_s": ...}``. With
RATE: paced at RATE tasks/s, each stamped with the wall clock just before its call
(``stamp.py``). ``wallclock``: unpaced, each stamped 1 ns after the epoch, so the handler
records its own wall clock (µs): when the task started, for a start-up measurement."""

import asyncio
import json
import sys
import time

STAMP = 0  # what an unpaced task carries; 1 with ``wallclock``


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
            yield i, STAMP


async def apaced(n: int, rate: float):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    for i in range(n):
        if rate:
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            yield i, time.time_ns()
        else:
            yield i, STAMP


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


async def arq(n: int, rate: float) -> None:
    from arq import create_pool
    from arq_noop import WorkerSettings

    pool = await create_pool(WorkerSettings.redis_settings)
    async for i, t in apaced(n, rate):
        await pool.enqueue_job("noop", i, t)
    await pool.aclose()


def celery(n: int, rate: float) -> None:
    from celery_noop import noop

    for i, t in paced(n, rate):
        noop.delay(i, t)


async def bare(n: int, rate: float) -> None:
    import os

    from redis.asyncio import Redis

    client = Redis.from_url(os.environ["PEER_REDIS_URL"])
    async for i, t in apaced(n, rate):
        await client.xadd("bare", {"task": json.dumps({"i": i, "t": t})})
    await client.aclose()


if __name__ == "__main__":
    peer, count = sys.argv[1], int(sys.argv[2])
    if len(sys.argv) > 3 and sys.argv[3] == "wallclock":
        STAMP, rate = 1, 0.0
    else:
        rate = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    started = time.perf_counter()
    if peer in ("dramatiq", "celery"):
        {"dramatiq": dramatiq, "celery": celery}[peer](count, rate)
    else:
        runs = {"taskiq": taskiq, "faststream": faststream, "bare": bare, "arq": arq}
        asyncio.run(runs[peer](count, rate))
    print(json.dumps({"enqueue_per_s": round(count / (time.perf_counter() - started))}))
