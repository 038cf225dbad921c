"""Benchmark of tasks waiting for a person's reply (``ctx.ask``).

    .venv/bin/python loadtests/bench_waiting.py --waiting 100000 --memory-tasks 10000 --runs 3

Against a fresh embedded Redis (or --redis-url; every key is under a fresh prefix), with
one worker process (``deepagents worker tests.support.asking:MixedAgent``, p2 pool 100):

1. memory: ``--memory-tasks`` tasks submitted and parked; Redis's ``used_memory`` before
   and after, per waiting task (everything a waiting task holds: task hash, the record of
   its task and question, location record, delayed-set and waiting-index members), and
   ``MEMORY USAGE`` of one waiting task's keys; then replied to and drained;
2. the drain of ``--work`` 20 ms tasks with nothing waiting (the baseline, same run);
3. ``--waiting`` tasks parked (submit to all waiting: park/s);
4. the drain of ``--work`` 20 ms tasks again, beside them: the ratio to the baseline;
5. a reply to every one (``Orchestrator.reply``, 200 at a time): replies/s; then until
   every one has its result (reply to result: resumed/s).

Prints one JSON line per run and the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import Settings, parse_config
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator, TaskHandle
from deepagents.transport.redis_streams import connect

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.support.asking: the agent the worker runs

CONFIG = """
tiers:
  p0: {concurrency: 5, max_wait_ms: 60000}
  p2: {concurrency: 100, max_wait_ms: 3600000}
default_tier: p2
defaults: {shards: 4, max_backlog: 10000000, batch_size: 100}
agents:
  mixed: {class: "tests.support.asking:MixedAgent"}
"""
SHARDS = 4


def start_worker(
    url: str, prefix: str, config_path: str, *, outbox: bool
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DEEPAGENTS_REDIS_URL": url,
        "DEEPAGENTS_PREFIX": prefix,
        "DEEPAGENTS_CONFIG": config_path,
        # Off: with it on, each park also appends its `waiting` audit event to the outbox
        # stream until the audit writer drains it (none runs here); --outbox counts that in.
        "DEEPAGENTS_OUTBOX": "true" if outbox else "false",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "deepagents", "worker", "tests.support.asking:MixedAgent"],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def submit(orch: Orchestrator, n: int, payload: dict[str, Any]) -> list[TaskHandle]:
    handles: list[TaskHandle] = []
    for i in range(0, n, 500):
        batch = [Task(intent="mixed", payload=payload) for _ in range(min(500, n - i))]
        handles += await orch.submit_many(batch)
    return handles


async def waiting(client: Any, prefix: str) -> int:
    pipe = client.pipeline(transaction=False)
    for shard in range(SHARDS):
        pipe.zcard(f"{prefix}:{{mixed:{shard}}}:waiting")
    return sum(int(n) for n in await pipe.execute())


async def until_waiting(client: Any, prefix: str, n: int) -> None:
    while await waiting(client, prefix) < n:
        await asyncio.sleep(0.05)


async def results(handles: list[TaskHandle], timeout: float = 1800) -> None:
    for i in range(0, len(handles), 5000):
        chunk = handles[i : i + 5000]
        done = await asyncio.gather(*(h.result(timeout=timeout) for h in chunk))
        bad = [r for r in done if r.status is not ResultStatus.SUCCESS]
        assert not bad, bad[0]


async def drain(orch: Orchestrator, n: int) -> float:
    started = time.perf_counter()
    await results(await submit(orch, n, {"sleep_ms": 20}))
    return time.perf_counter() - started


async def reply_all(orch: Orchestrator, handles: list[TaskHandle], at_once: int = 200) -> None:
    gate = asyncio.Semaphore(at_once)

    async def one(h: TaskHandle) -> None:
        async with gate:
            await orch.reply(h.task_id, {"approved": True})

    await asyncio.gather(*(one(h) for h in handles))


async def used_memory(client: Any) -> int:
    return int((await client.info("memory"))["used_memory"])


async def _bytes(client: Any, key: str) -> int:
    """``MEMORY USAGE`` of a key that must be there (a missing one is the benchmark's bug)."""
    size = await client.memory_usage(key, samples=0)
    if size is None:
        raise SystemExit(f"bench_waiting: {key} is missing")
    return int(size)


async def one_run(url: str, args: argparse.Namespace, run: int) -> dict[str, Any]:
    prefix = f"benchwait{run}-{os.getpid()}"
    config = parse_config(CONFIG)
    settings = Settings(prefix=prefix, outbox=False)
    client = connect(url)
    out: dict[str, Any] = {"run": run}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(CONFIG)
    worker = start_worker(url, prefix, f.name, outbox=args.outbox)
    try:
        async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
            while not await client.hlen(f"{prefix}:agent:mixed:instances"):
                await asyncio.sleep(0.05)
            await drain(orch, 200)  # warm: imports, scripts, connections
            # 1. memory per waiting task
            m = args.memory_tasks
            before = await used_memory(client)
            parked = await submit(orch, m, {"ask": True})
            await until_waiting(client, prefix, m)
            after = await used_memory(client)
            out["bytes_per_waiting_task"] = round((after - before) / m)
            one = parked[0]
            key = f"{prefix}:{{mixed:{one.shard}}}:t:{one.task_id}"
            out["task_hash_bytes"] = await _bytes(client, key)
            record = f"{prefix}:{{mixed:{one.shard}}}:q:{one.task_id}"
            out["question_record_bytes"] = await _bytes(client, record)
            loc = f"{prefix}:loc:{one.task_id}"
            out["location_bytes"] = await _bytes(client, loc)
            sets = 0
            for shard in range(SHARDS):
                for name in ("delayed", "waiting"):
                    used = await client.memory_usage(
                        f"{prefix}:{{mixed:{shard}}}:{name}", samples=0
                    )
                    sets += int(used or 0)
            out["sets_bytes_per_task"] = round(sets / m)
            await reply_all(orch, parked)
            await results(parked)
            # 2. baseline drain
            out["drain_alone_s"] = round(await drain(orch, args.work), 3)
            # 3. park many
            started = time.perf_counter()
            many = await submit(orch, args.waiting, {"ask": True})
            await until_waiting(client, prefix, args.waiting)
            park_s = time.perf_counter() - started
            out["waiting"] = args.waiting
            out["park_per_s"] = round(args.waiting / park_s)
            out["used_memory_mb"] = round(await used_memory(client) / 2**20, 1)
            # 4. drain beside them
            out["drain_beside_waiting_s"] = round(await drain(orch, args.work), 3)
            out["drain_ratio"] = round(out["drain_beside_waiting_s"] / out["drain_alone_s"], 2)
            # 5. reply to all, then every result
            started = time.perf_counter()
            await reply_all(orch, many)
            replied_s = time.perf_counter() - started
            await results(many)
            resumed_s = time.perf_counter() - started
            out["replies_per_s"] = round(args.waiting / replied_s)
            out["reply_to_all_results_s"] = round(resumed_s, 1)
            out["resumed_per_s"] = round(args.waiting / resumed_s)
    finally:
        worker.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.wait(30)
        os.unlink(f.name)
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=5000)]
        for i in range(0, len(keys), 1000):
            await client.delete(*keys[i : i + 1000])
        await client.aclose()
    return out


async def main_async(args: argparse.Namespace, url: str) -> None:
    runs = []
    for run in range(args.runs):
        row = await one_run(url, args, run)
        print(orjson.dumps(row).decode(), flush=True)
        runs.append(row)
    medians = {
        k: statistics.median(r[k] for r in runs)
        for k in runs[0]
        if k != "run" and isinstance(runs[0][k], int | float)
    }
    print(orjson.dumps({"median_of": len(runs), **medians}).decode(), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--waiting", type=int, default=100_000)
    parser.add_argument("--memory-tasks", type=int, default=10_000)
    parser.add_argument("--work", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--redis-url", help="default: a fresh embedded Redis")
    parser.add_argument("--outbox", action="store_true", help="audit events on (undrained)")
    args = parser.parse_args()
    if args.redis_url:
        asyncio.run(main_async(args, args.redis_url))
        return
    with EmbeddedRedis() as server:
        asyncio.run(main_async(args, server.url))


if __name__ == "__main__":
    main()
