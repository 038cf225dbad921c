"""The in-process bus against the Redis bus running the real Lua scripts in process on
fakeredis (its ``lupa`` Lua support), and against a real Redis: what each costs per task
through the delivery protocol's round (enqueue, read, begin, commit), one task's worth of
what a unit test of an agent does.

    .venv/bin/python loadtests/bench_memory_backends.py --tasks 2000 --runs 3
    .venv/bin/python loadtests/bench_memory_backends.py --redis-url redis://127.0.0.1:6379/0

fakeredis is not a dependency of the project (docs/design.md, "One source of protocol
semantics", says why): install it beside it to run this, e.g. ``pip install --target
/tmp/fr 'fakeredis[lua]'`` and ``PYTHONPATH=/tmp/fr``. Its server runs in a thread of
this process (``TcpFakeServer``), as a harness on it would: the bus's own connections
(``Lanes``) speak RESP over a socket. Each round is batched as the worker batches
(``--batch`` tasks a call). Printed per backend: µs per task (median of the runs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from deepagents.transport.base import BeginItem, CommitItem, Enqueue, MessageBus, StreamRef
from deepagents.transport.keys import Keys
from deepagents.transport.memory import MemoryBus
from deepagents.transport.redis_streams import RedisStreamBus, connect

GROUP = "echo"


async def one_round(bus: MessageBus, prefix: str, tasks: int, batch: int) -> float:
    """Seconds for ``tasks`` tasks through enqueue, read, begin and commit."""
    ref = StreamRef(Keys(prefix).shard(GROUP, 0), "p2")
    await bus.ensure_group(ref, GROUP)
    started = time.perf_counter()
    for start in range(0, tasks, batch):
        ids = [f"t{n}" for n in range(start, min(tasks, start + batch))]
        items = [Enqueue(ref, t, b'{"task_id":"%s","intent":"echo"}' % t.encode()) for t in ids]
        await bus.enqueue_many(items, max_backlog=tasks + 1)
        entries = await bus.read(ref, GROUP, "c1", len(ids), None)
        begins = [BeginItem(e.entry_id, t, 1) for e, t in zip(entries, ids, strict=True)]
        await bus.begin(ref, GROUP, "c1", begins, fresh=True)
        commits = [CommitItem(e.entry_id, t, b"{}") for e, t in zip(entries, ids, strict=True)]
        statuses = await bus.commit(ref, GROUP, "c1", commits)
        assert all(s == "ok" for s in statuses), statuses
    return time.perf_counter() - started


@asynccontextmanager
async def memory() -> AsyncIterator[MessageBus]:
    yield MemoryBus(result_ttl_s=60)


@asynccontextmanager
async def on_redis(url: str) -> AsyncIterator[MessageBus]:
    client = connect(url)
    bus = RedisStreamBus(client, result_ttl_s=60)
    try:
        yield bus
    finally:
        await bus.aclose()
        await client.aclose()


@asynccontextmanager
async def on_fakeredis() -> AsyncIterator[MessageBus]:
    # Optional: not a dependency of the project.
    from fakeredis import TcpFakeServer  # type: ignore[import-not-found]

    server = TcpFakeServer(("127.0.0.1", 0), server_version=(7, 2))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    try:
        async with on_redis(f"redis://{host!s}:{port}/0") as bus:
            yield bus
    finally:
        server.shutdown()
        server.server_close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2_000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--redis-url", default="", help="a real Redis to compare with")
    args = parser.parse_args()
    backends: dict[str, Callable[[], object]] = {
        "memory": memory,
        "fakeredis_lua": on_fakeredis,
    }
    if args.redis_url:
        backends["redis"] = lambda: on_redis(args.redis_url)
    times: dict[str, list[float]] = {name: [] for name in backends}
    for _ in range(args.runs):  # alternating, so load on the machine falls on each alike
        for name, make in backends.items():
            prefix = f"bench-backends-{uuid.uuid4().hex[:8]}"
            async with make() as bus:  # type: ignore[attr-defined]
                took = await one_round(bus, prefix, args.tasks, args.batch)
                if name == "redis":
                    await _clean(bus, prefix)
            times[name].append(took)
    us = {name: round(statistics.median(t) / args.tasks * 1e6, 1) for name, t in times.items()}
    print(json.dumps({"tasks": args.tasks, "batch": args.batch, "us_per_task": us}))


async def _clean(bus: MessageBus, prefix: str) -> None:
    client = bus.client  # type: ignore[attr-defined]
    keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
    if keys:
        await client.delete(*keys)


if __name__ == "__main__":
    asyncio.run(main())
