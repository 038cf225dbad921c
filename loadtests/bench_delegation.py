"""Benchmark of a delegation round trip on an idle worker (``ctx.delegate``).

    .venv/bin/python loadtests/bench_delegation.py --tasks 300 --runs 3

Against a fresh embedded Redis (or --redis-url; every key under a fresh prefix), with one
worker process per agent type (``tests.support.delegation:ParentAgent`` and
``HelperAgent``), the outbox on, one task at a time (an idle worker):

1. the baseline: a ``help`` task submitted directly, submit → result in the submitter;
2. a ``fanout`` task delegating one ``help`` child: the parent runs, submits the child
   and parks; the child runs and commits; its end wakes the parent, which runs again,
   finds the child's result and commits. Submit → parent result.

The delegation round trip is (2) − (1) at the median: park, the child's submit and its
end carried to the parent, the parent's second delivery. Prints one JSON line per run
and the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import orjson

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import Settings, parse_config
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from deepagents.transport.redis_streams import connect

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.support.delegation: the agents the workers run

CONFIG = """
tiers:
  p2: {concurrency: 10, max_wait_ms: 3600000}
default_tier: p2
defaults: {shards: 2, block_ms: 1000}
agents:
  parent: {class: "tests.support.delegation:ParentAgent"}
  helper: {class: "tests.support.delegation:HelperAgent"}
"""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def start_worker(url: str, prefix: str, config: str, agent: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DEEPAGENTS_REDIS_URL": url,
        "DEEPAGENTS_PREFIX": prefix,
        "DEEPAGENTS_CONFIG": config,
        "DEEPAGENTS_OUTBOX": "true",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "deepagents", "worker", f"tests.support.delegation:{agent}"],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def timed(orch: Orchestrator, task: Task) -> float:
    started = time.perf_counter()
    handle = await orch.submit(task)
    result = await handle.result(timeout=60)
    assert result.status is ResultStatus.SUCCESS, result.error
    return (time.perf_counter() - started) * 1000


async def one_run(url: str, tasks: int) -> dict[str, float]:
    prefix = f"bd{uuid.uuid4().hex[:8]}"
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(CONFIG)
    config = parse_config(CONFIG)
    workers = [start_worker(url, prefix, f.name, a) for a in ("ParentAgent", "HelperAgent")]
    client = connect(url)
    try:
        settings = Settings(prefix=prefix, outbox=True)
        async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
            for _ in range(20):  # warm-up, untimed: both workers up, connections made
                await timed(orch, Task(intent="fanout", payload={"n": 1}))
            plain = [await timed(orch, Task(intent="help", payload={})) for _ in range(tasks)]
            delegated = [
                await timed(orch, Task(intent="fanout", payload={"n": 1})) for _ in range(tasks)
            ]
    finally:
        for w in workers:
            w.terminate()
            w.wait(30)
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
        for i in range(0, len(keys), 500):
            await client.delete(*keys[i : i + 500])
        await client.aclose()
        os.unlink(f.name)
    p50_plain, p50_parent = pct(plain, 0.5), pct(delegated, 0.5)
    return {
        "plain_p50_ms": round(p50_plain, 2),
        "plain_p95_ms": round(pct(plain, 0.95), 2),
        "parent_p50_ms": round(p50_parent, 2),
        "parent_p95_ms": round(pct(delegated, 0.95), 2),
        "round_trip_p50_ms": round(p50_parent - p50_plain, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--redis-url")
    args = parser.parse_args()
    runs = []
    for _ in range(args.runs):
        if args.redis_url:
            row = asyncio.run(one_run(args.redis_url, args.tasks))
        else:
            with EmbeddedRedis() as server:
                row = asyncio.run(one_run(server.url, args.tasks))
        print(orjson.dumps(row).decode(), flush=True)
        runs.append(row)
    medians = {k: round(statistics.median(r[k] for r in runs), 2) for k in runs[0]}
    print(orjson.dumps({"median": medians}).decode())


if __name__ == "__main__":
    main()
