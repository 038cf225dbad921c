"""The worker's own cost per task, in-process: no subprocess, no metrics server, no harness
traffic while it drains.

    .venv/bin/python loadtests/bench_worker_inprocess.py --tasks 20000 --runs 3
    .venv/bin/python loadtests/bench_worker_inprocess.py --tasks 20000 --runs 1 --commandstats

Per run, against a fresh embedded Redis: submit N echo tasks (same config as
bench_core.py), then run a ``Worker`` in this process until all are committed; print
drain tasks/s, this process's CPU µs per task and the Redis server's CPU µs per task.
``--commandstats`` also prints Redis's ``INFO commandstats`` for the drain alone
(reset after submitting), which splits the server's time by command, the ones Lua
scripts call included. ``--waits`` times the awaits of the worker's p2 readers and
committer (wall time, mean ms per call, calls that ended within the drain): its read, its
begin, its wait for commit room and for slots, and the group commit's round trip.

    .venv/bin/python loadtests/bench_worker_inprocess.py --tasks 20000 --runs 1 --waits

To compare two commits, run this file from a ``git worktree`` of each (it imports the
package of the tree it sits in), alternating, several pairs: this machine's speed moves
by ±20% from run to run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's package

import orjson
import psutil
from bench_core import CONFIG

from agents.echo import EchoAgent
from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.cli.common import run
from deepagents.config import Settings, parse_config
from deepagents.contract import Task
from deepagents.orchestrator import Orchestrator
from deepagents.transport.redis_streams import connect
from deepagents.transport.redis_streams.bus import RedisStreamBus
from deepagents.worker import Worker
from deepagents.worker.pools import TierPool
from deepagents.worker.stream_commits import Committer

# What --waits times: (class, method, label, whether the call is a p2 reader's).
_TIMED = (
    (RedisStreamBus, "read", "read", lambda args: args[0].tier == "p2"),
    (RedisStreamBus, "begin", "begin", lambda args: args[0].tier == "p2"),
    (Committer, "room", "commit_room", lambda args: args[0] == "p2"),
    (TierPool, "take", "slots", lambda args: True),
    (RedisStreamBus, "commit_streams", "commit", lambda args: True),
)


@contextlib.contextmanager
def timed_awaits(calls: dict[str, list[tuple[float, float]]]) -> Iterator[None]:
    """Wrap the methods of ``_TIMED`` for the block: (start, end) per call and label."""
    saved = [(cls, name, getattr(cls, name)) for cls, name, _, _ in _TIMED]

    def wrap(orig: Any, label: str, counts: Any) -> Any:
        async def timed(self: Any, *args: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await orig(self, *args, **kw)
            finally:
                if counts(args) and (label != "slots" or self.name == "p2"):
                    calls[label].append((t0, time.perf_counter()))

        return timed

    for (cls, name, label, counts), (_, _, orig) in zip(_TIMED, saved, strict=True):
        setattr(cls, name, wrap(orig, label, counts))
    try:
        yield
    finally:
        for cls, name, orig in saved:
            setattr(cls, name, orig)


async def one_run(
    url: str, redis_pid: int, n: int, commandstats: bool, waits: bool
) -> dict[str, Any]:
    config = parse_config(CONFIG)
    settings = Settings(prefix=f"inproc{os.getpid()}", outbox=True)
    client = connect(url)
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        for i in range(0, n, 500):
            await orch.submit_many(
                [Task(intent="echo", payload={"i": j}) for j in range(i, min(n, i + 500))]
            )
    await client.config_resetstat()
    calls: dict[str, list[tuple[float, float]]] = defaultdict(list)
    with timed_awaits(calls) if waits else contextlib.nullcontext():
        worker = Worker.from_client(EchoAgent(), client=client, config=config, settings=settings)
        running = asyncio.create_task(worker.run())
        await worker.ready.wait()
        redis = psutil.Process(redis_pid)
        redis0, cpu0 = sum(redis.cpu_times()[:2]), time.process_time()
        start = time.perf_counter()
        while worker.stats.committed < n:
            await asyncio.sleep(0.005)
        end = time.perf_counter()
        cpu, redis_cpu = time.process_time() - cpu0, sum(redis.cpu_times()[:2]) - redis0
        worker.stop()
        await running
    elapsed = end - start
    out: dict[str, Any] = {
        "tasks": n,
        "drain_per_s": round(n / elapsed),
        "worker_cpu_us_per_task": round(cpu / n * 1e6, 1),
        "redis_cpu_us_per_task": round(redis_cpu / n * 1e6, 1),
    }
    if commandstats:
        stats = await client.info("commandstats")
        out["commandstats_us_per_task"] = {
            name.removeprefix("cmdstat_"): round(v["usec"] / n, 2)
            for name, v in sorted(stats.items(), key=lambda kv: -kv[1]["usec"])
            if v["usec"] / n >= 0.05
        }
    if waits:  # calls that ended within the drain (a reader's last read blocks past it)
        out["waits_ms"] = {
            label: {
                "calls": len(ended),
                "mean": round(statistics.mean(t1 - t0 for t0, t1 in ended) * 1000, 3),
            }
            for label, spans in calls.items()
            if (ended := [(t0, t1) for t0, t1 in spans if start <= t0 and t1 <= end])
        }
    await client.aclose()
    return out


def main(args: argparse.Namespace) -> None:
    runs = []
    for _ in range(args.runs):
        with EmbeddedRedis() as server:
            assert server.process is not None
            runs.append(
                run(
                    one_run(
                        server.url, server.process.pid, args.tasks, args.commandstats, args.waits
                    )
                )
            )
        print(orjson.dumps(runs[-1]).decode(), flush=True)
    keys = ("drain_per_s", "worker_cpu_us_per_task", "redis_cpu_us_per_task")
    print(
        "median " + orjson.dumps({k: statistics.median(r[k] for r in runs) for k in keys}).decode()
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--commandstats", action="store_true")
    parser.add_argument("--waits", action="store_true")
    main(parser.parse_args())
