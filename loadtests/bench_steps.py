"""Benchmark of durable steps (issue 19) on Redis.

    .venv/bin/python loadtests/bench_steps.py --runs 3

Per run, against a fresh embedded Redis (or --redis-url):
1. step overhead: an in-process worker with one slot runs tasks of ``--steps`` steps each
   (an async fn that returns a small dict at once), one task at a time; each ``await
   ctx.step(...)`` is timed inside the agent: the owner-checked record script's round trip
   and the runtime's work around it. p50/p99 in ms, and the same for ``ctx.checkpoint()``;
2. drain, paired: ``--tasks`` tasks of an agent with one step, then as many of an agent with
   none, each drained by one worker process (as bench_core), in the same run: tasks/s each
   and their ratio; the worker process's CPU µs per task of each.
Prints a JSON line per run and the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

import orjson
import psutil
from pydantic import BaseModel

from deepagents import AgentContract, Result, Task
from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import Settings, parse_config
from deepagents.orchestrator import Orchestrator
from deepagents.transport.redis_streams import connect
from deepagents.worker import Worker

REPO = Path(__file__).resolve().parents[1]
STEP_MS: list[float] = []
CHECKPOINT_MS: list[float] = []


class Counter(BaseModel):
    n: int = 0


async def _noop(i: int) -> dict[str, int]:
    return {"i": i}


class Overhead(AgentContract):
    name = "overhead"
    version = "1"
    intents = ("overhead",)
    state_model: ClassVar[type[BaseModel] | None] = Counter

    async def execute(self, context: dict[str, Any]) -> Result:
        ctx, steps = context["ctx"], int(context["payload"]["steps"])
        for i in range(steps):
            t0 = time.perf_counter()
            await ctx.step("s", _noop, i)
            STEP_MS.append((time.perf_counter() - t0) * 1000)
        ctx.state.n = steps
        t0 = time.perf_counter()
        await ctx.checkpoint()
        CHECKPOINT_MS.append((time.perf_counter() - t0) * 1000)
        return Result(output={"steps": steps})


class OneStep(AgentContract):
    name = "onestep"
    version = "1"
    intents = ("onestep",)

    async def execute(self, context: dict[str, Any]) -> Result:
        value = await context["ctx"].step("only", _noop, 1)
        return Result(output=value)


class NoStep(AgentContract):
    name = "nostep"
    version = "1"
    intents = ("nostep",)

    async def execute(self, context: dict[str, Any]) -> Result:
        return Result(output={"i": 1})


OVERHEAD_CONFIG = """
tiers: {p2: {concurrency: 1, max_wait_ms: 600000}}
default_tier: p2
defaults: {shards: 1, block_ms: 100}
"""
DRAIN_CONFIG = """
defaults: {shards: 4, max_backlog: 10000000, batch_size: 100}
"""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def overhead(url: str, prefix: str, tasks: int, steps: int) -> dict[str, float]:
    config = parse_config(OVERHEAD_CONFIG)
    settings = Settings(prefix=prefix, outbox=True)
    client = connect(url)
    worker = Worker.from_client(Overhead(), client=client, config=config, settings=settings)
    running = asyncio.create_task(worker.run())
    await worker.ready.wait()
    STEP_MS.clear()
    CHECKPOINT_MS.clear()
    try:
        # The classes themselves, not a config's module path: this script is __main__, and
        # the timings are appended to its lists.
        async with Orchestrator.from_client(
            client, config=config, settings=settings, agents=[Overhead]
        ) as orch:
            for _ in range(tasks):
                handle = await orch.submit(Task(intent="overhead", payload={"steps": steps}))
                await handle.result(timeout=60)
    finally:
        worker.stop()
        await running
        await client.aclose()
    return {
        "step_p50_ms": round(pct(STEP_MS, 0.5), 3),
        "step_p99_ms": round(pct(STEP_MS, 0.99), 3),
        "checkpoint_p50_ms": round(pct(CHECKPOINT_MS, 0.5), 3),
        "checkpoint_p99_ms": round(pct(CHECKPOINT_MS, 0.99), 3),
        "steps_timed": len(STEP_MS),
    }


async def drain(url: str, prefix: str, agent: str, n: int, config_path: str) -> tuple[int, float]:
    """Tasks/s, and the worker process's CPU µs per task (steadier than tasks/s on a
    machine other work shares)."""
    config = parse_config(DRAIN_CONFIG)
    settings = Settings(prefix=prefix, outbox=True)
    client = connect(url)
    async with Orchestrator.from_client(
        client, config=config, settings=settings, agents=[OneStep, NoStep]
    ) as orch:
        for i in range(0, n, 500):
            await orch.submit_many([Task(intent=agent, payload={}) for _ in range(min(500, n - i))])
    env = {**os.environ, "DEEPAGENTS_REDIS_URL": url, "DEEPAGENTS_PREFIX": prefix,
           "DEEPAGENTS_CONFIG": config_path, "DEEPAGENTS_OUTBOX": "true"}  # fmt: skip
    cls = {"onestep": "OneStep", "nostep": "NoStep"}[agent]
    worker = subprocess.Popen(  # noqa: ASYNC220 - started once per run, not on a hot path
        [sys.executable, "-m", "deepagents", "worker", f"loadtests.bench_steps:{cls}"],
        env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        while not await client.hlen(f"{prefix}:agent:{agent}:instances"):
            await asyncio.sleep(0.05)
        proc = psutil.Process(worker.pid)
        cpu0, start = proc.cpu_times(), time.perf_counter()
        while sum([await client.xlen(f"{prefix}:{{{agent}:{s}}}:p2") for s in range(4)]):
            await asyncio.sleep(0.01)
        cpu1, elapsed = proc.cpu_times(), time.perf_counter() - start
        cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
        return round(n / elapsed), round(cpu / n * 1e6, 1)
    finally:
        worker.terminate()
        worker.wait(30)
        await client.aclose()


async def one_run(url: str, args: argparse.Namespace, run: int) -> dict[str, Any]:
    prefix = f"benchsteps{run}-{os.getpid()}"
    out: dict[str, Any] = {"run": run}
    out.update(await overhead(url, f"{prefix}o", args.overhead_tasks, args.steps))
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(DRAIN_CONFIG)
    try:
        # Paired: the two drains back to back, their order alternating from run to run, so
        # that a change in the machine's load hits both alike over the runs.
        order = ["onestep", "nostep"] if run % 2 == 0 else ["nostep", "onestep"]
        got = {a: await drain(url, f"{prefix}{a}", a, args.tasks, f.name) for a in order}
        one, none = got["onestep"], got["nostep"]
        out["one_step_drain_per_s"], out["one_step_worker_cpu_us"] = one
        out["no_step_drain_per_s"], out["no_step_worker_cpu_us"] = none
    finally:
        os.unlink(f.name)
    out["one_step_vs_none"] = round(out["one_step_drain_per_s"] / out["no_step_drain_per_s"], 3)
    out["step_worker_cpu_us"] = round(
        out["one_step_worker_cpu_us"] - out["no_step_worker_cpu_us"], 1
    )
    out["load_average"] = round(os.getloadavg()[0], 1)
    client = connect(url)
    keys = [k async for k in client.scan_iter(match=f"{prefix}*", count=1000)]
    for i in range(0, len(keys), 500):
        await client.delete(*keys[i : i + 500])
    await client.aclose()
    return out


async def main(args: argparse.Namespace) -> None:
    runs = []
    for run in range(args.runs):
        if args.redis_url:
            runs.append(await one_run(args.redis_url, args, run))
        else:
            with EmbeddedRedis() as server:
                runs.append(await one_run(server.url, args, run))
        print(orjson.dumps(runs[-1]).decode(), flush=True)
    keys = [k for k in runs[0] if k != "run"]
    medians = {k: statistics.median(r[k] for r in runs) for k in keys}
    print("median " + orjson.dumps(medians).decode())


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=10_000, help="per agent, drain phase")
    parser.add_argument("--overhead-tasks", type=int, default=100)
    parser.add_argument("--steps", type=int, default=50, help="per task, overhead phase")
    parser.add_argument("--redis-url", help="default: a fresh embedded Redis per run")
    try:
        asyncio.run(main(parser.parse_args()))
    except KeyboardInterrupt:
        sys.exit("interrupted: the worker and the embedded Redis were stopped")
