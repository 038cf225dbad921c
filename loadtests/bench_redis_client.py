"""CPU per command through redis-py's client (the project's pool) against a connection
used directly, as the worker's lanes do (``transport/redis_streams/lanes.py``).

    .venv/bin/python loadtests/bench_redis_client.py [--redis-url URL] [--commands 5000]

Prints the client's CPU µs per PING both ways, three rounds (default: a fresh embedded
Redis).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's package

from redis_target import bench_main

from deepagents.transport.redis_streams import connect
from deepagents.transport.redis_streams.lanes import Lanes


async def measure(url: str, n: int) -> None:
    client = connect(url)
    lanes = Lanes(client)
    await client.ping()
    await lanes.call("PING")
    for _ in range(3):
        start = time.process_time()
        for _ in range(n):
            await client.execute_command("PING")  # type: ignore[no-untyped-call]
        pooled = (time.process_time() - start) / n * 1e6
        start = time.process_time()
        for _ in range(n):
            await lanes.call("PING")
        direct = (time.process_time() - start) / n * 1e6
        print(f"client (pool) {pooled:.1f} µs/command, direct connection {direct:.1f} µs/command")
    await lanes.aclose()
    await client.aclose()


if __name__ == "__main__":
    bench_main(__doc__, "commands", 5_000, measure)
