"""The worker's own cost per task, in-process: no subprocess, no metrics server, no harness
traffic while it drains.

    .venv/bin/python loadtests/bench_worker_inprocess.py --tasks 20000 --runs 3
    .venv/bin/python loadtests/bench_worker_inprocess.py --tasks 20000 --runs 1 --commandstats

Per run, against a fresh embedded Redis: submit N echo tasks (same config as
bench_core.py), then run a ``Worker`` in this process until all are committed; print
drain tasks/s, this process's CPU µs per task and the Redis server's CPU µs per task.
``--commandstats`` also prints Redis's ``INFO commandstats`` for the drain alone
(reset after submitting), which splits the server's time by command, the ones Lua
scripts call included.

To compare two commits, run this file from a ``git worktree`` of each (it imports the
package of the tree it sits in), alternating, several pairs: this machine's speed moves
by ±20% from run to run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
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
from deepagents.worker import Worker


async def one_run(url: str, redis_pid: int, n: int, commandstats: bool) -> dict[str, Any]:
    config = parse_config(CONFIG)
    settings = Settings(prefix=f"inproc{os.getpid()}", outbox=True)
    client = connect(url)
    async with Orchestrator(client, config=config, settings=settings) as orch:
        for i in range(0, n, 500):
            await orch.submit_many(
                [Task(intent="echo", payload={"i": j}) for j in range(i, min(n, i + 500))]
            )
    await client.config_resetstat()
    worker = Worker(EchoAgent(), client=client, config=config, settings=settings)
    running = asyncio.create_task(worker.run())
    await worker.ready.wait()
    redis = psutil.Process(redis_pid)
    redis0, cpu0, start = sum(redis.cpu_times()[:2]), time.process_time(), time.perf_counter()
    while worker.stats.committed < n:
        await asyncio.sleep(0.005)
    elapsed = time.perf_counter() - start
    cpu, redis_cpu = time.process_time() - cpu0, sum(redis.cpu_times()[:2]) - redis0
    worker.stop()
    await running
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
    await client.aclose()
    return out


def main(args: argparse.Namespace) -> None:
    runs = []
    for _ in range(args.runs):
        with EmbeddedRedis() as server:
            assert server.process is not None
            runs.append(run(one_run(server.url, server.process.pid, args.tasks, args.commandstats)))
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
    main(parser.parse_args())
