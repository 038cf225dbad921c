"""Enqueue N no-op tasks for a peer, run in the peers' venv: enqueue.py taskiq|dramatiq N"""

import asyncio
import sys


async def taskiq(n: int) -> None:
    from taskiq_noop import broker, noop

    await broker.startup()  # creates the consumer group
    for i in range(n):
        await noop.kiq(i)
    await broker.shutdown()


def dramatiq(n: int) -> None:
    from dramatiq_noop import noop

    for i in range(n):
        noop.send(i)


if __name__ == "__main__":
    peer, count = sys.argv[1], int(sys.argv[2])
    if peer == "taskiq":
        asyncio.run(taskiq(count))
    else:
        dramatiq(count)
