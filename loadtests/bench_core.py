"""Benchmark of the stream path end to end with the EchoAgent.

    .venv/bin/python loadtests/bench_core.py --tasks 20000 --runs 3

Per run, against a fresh embedded Redis (or --redis-url):
1. submit N tasks with ``submit_many`` (batches of 500): submit tasks/s;
2. drain them with one worker process (``deepagents worker agents.echo:EchoAgent``, full
   protocol: begin, result write, owner-checked ack + delete, outbox event, reply
   notification): drain tasks/s, worker CPU µs per task, the embedded Redis server's CPU
   µs per task, this harness's CPU µs per task (it only polls the backlog meanwhile: the
   submitting orchestrator is closed), worker peak RSS;
3. a fixed offered load (default 500 tasks/s) submitted one by one while the worker runs,
   after one untimed second of warm-up: end-to-end latency p50/p95/p99 (submit → result
   in the submitter);
4. baseline in the same run: a bare redis-py loop (XREADGROUP COUNT 100 + pipelined XACK,
   no result, no audit) draining the same number of entries.
``--processes N``: the worker is ``deepagents worker ... --processes N`` (a supervisor
forking N workers); CPU is the whole tree's.
Prints a JSON line per run and the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import psutil

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import Settings, parse_config
from deepagents.contract import Task
from deepagents.orchestrator import Orchestrator
from deepagents.transport.redis_streams import connect

CONFIG = """
defaults: {shards: 4, max_backlog: 10000000, batch_size: 100}
agents: {echo: {class: "agents.echo:EchoAgent"}}
"""
REPO = Path(__file__).resolve().parents[1]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def start_worker(
    url: str, prefix: str, config_path: str, processes: int = 1
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DEEPAGENTS_REDIS_URL": url,
        "DEEPAGENTS_PREFIX": prefix,
        "DEEPAGENTS_CONFIG": config_path,
        "DEEPAGENTS_OUTBOX": "true",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "deepagents", "worker", "agents.echo:EchoAgent"]
        + (["--processes", str(processes)] if processes > 1 else []),
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def tree_cpu(procs: list[psutil.Process]) -> tuple[float, float]:
    """User and system CPU seconds of ``procs``."""
    user = system = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = proc.cpu_times()
            user, system = user + times.user, system + times.system
    return user, system


async def wait_registered(client: Any, prefix: str, instances: int = 1) -> None:
    while await client.hlen(f"{prefix}:agent:echo:instances") < instances:
        await asyncio.sleep(0.05)


async def backlog(client: Any, prefix: str) -> int:
    total = 0
    for shard in range(4):
        total += await client.xlen(f"{prefix}:{{echo:{shard}}}:p2")
    return total


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


async def one_run(
    url: str,
    n: int,
    rate: float,
    seconds: float,
    run: int,
    redis_pid: int | None,
    *,
    listen: bool = False,
    processes: int = 1,
) -> dict[str, Any]:
    prefix = f"bench{run}-{os.getpid()}"
    config = parse_config(CONFIG)
    settings = Settings(prefix=prefix, outbox=True)
    client = connect(url)
    out: dict[str, Any] = {"run": run, "tasks": n}
    # 1. submit. The orchestrator is closed before the drain (unless ``listen``): its reply
    # listener would take every result on the cores the worker and Redis share, and an
    # upstream service runs elsewhere.
    submitter = contextlib.AsyncExitStack()
    orch = await submitter.enter_async_context(
        Orchestrator.from_client(client, config=config, settings=settings)
    )
    start = time.perf_counter()
    for i in range(0, n, 500):
        await orch.submit_many(
            [Task(intent="echo", payload={"i": j}) for j in range(i, min(n, i + 500))]
        )
    out["submit_per_s"] = round(n / (time.perf_counter() - start))
    if not listen:
        await submitter.aclose()
    # 2. drain with one worker process
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(CONFIG)
    worker = start_worker(url, prefix, f.name, processes)
    try:
        await wait_registered(client, prefix, processes)
        # The worker's whole tree: with --processes, the supervisor and its children.
        proc = psutil.Process(worker.pid)
        tree = [proc, *proc.children(recursive=True)]
        cpu0, harness0 = tree_cpu(tree), time.process_time()
        redis0 = cpu_s(redis_pid) if redis_pid else 0.0
        start = time.perf_counter()
        while await backlog(client, prefix):
            await asyncio.sleep(0.01)
        drain_s = time.perf_counter() - start
        cpu1 = tree_cpu(tree)
        await submitter.aclose()  # (listen: after the drain)
        if redis_pid:
            # The Redis server's own CPU per task: the ceiling one Redis core puts on the
            # drain rate, whatever the worker does (1e6 / this = tasks/s at 100% of a core).
            out["redis_cpu_us_per_task"] = round((cpu_s(redis_pid) - redis0) / n * 1e6, 1)
        out["harness_cpu_us_per_task"] = round((time.process_time() - harness0) / n * 1e6, 1)
        out["drain_per_s"] = round(n / drain_s)
        out["worker_cpu_us_per_task"] = round((cpu1[0] + cpu1[1] - cpu0[0] - cpu0[1]) / n * 1e6, 1)
        # The kernel's share: socket writes and reads, per round trip rather than per task.
        out["worker_sys_us_per_task"] = round((cpu1[1] - cpu0[1]) / n * 1e6, 1)
        # 3. latency at a fixed offered load, submitted and awaited through an orchestrator
        # (results by its reply channel). The harness's own heap (20,000 tasks and handles
        # from step 1) is frozen first: a full collection of it pauses this process for tens
        # of ms, which would be timed as task latency.
        gc.collect()
        gc.freeze()
        async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
            latencies: list[float] = []

            async def timed(record: bool) -> None:
                t0 = time.perf_counter()
                handle = await orch.submit(Task(intent="echo", payload={}))
                await handle.result(timeout=60)
                if record:
                    latencies.append((time.perf_counter() - t0) * 1000)

            # The first second is warm-up, not timed: the client's pool opens the connections
            # concurrent submits need (the drain phase used one), which takes tens of ms.
            warmup = int(rate)
            pending = []
            begin = time.perf_counter()
            for i in range(warmup + int(rate * seconds)):
                delay = begin + i / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                pending.append(asyncio.create_task(timed(i >= warmup)))
            await asyncio.gather(*pending)
        out.update({f"p{q}_ms": round(pct(latencies, q / 100), 2) for q in (50, 95, 99)})
        out["offered_per_s"] = rate
        out["worker_peak_rss_mb"] = round(peak_rss_mb(worker.pid), 1)
    finally:  # also when this run is interrupted (SIGTERM is Ctrl-C here)
        worker.terminate()
        worker.wait(30)
        os.unlink(f.name)
    gc.unfreeze()
    # 4. baseline: bare XREADGROUP + XACK loop over the same number of entries
    out["baseline_bare_drain_per_s"] = await bare_drain(client, f"{prefix}:bare", n)
    keys = [k async for k in client.scan_iter(match=f"{prefix}*", count=1000)]
    for i in range(0, len(keys), 500):
        await client.delete(*keys[i : i + 500])
    await client.aclose()
    return out


async def bare_drain(client: Any, stream: str, n: int) -> int:
    await client.xgroup_create(stream, "g", id="0", mkstream=True)
    for i in range(0, n, 1000):
        pipe = client.pipeline(transaction=False)
        for j in range(i, min(n, i + 1000)):
            pipe.xadd(stream, {"task": orjson.dumps({"i": j})})
        await pipe.execute()
    start = time.perf_counter()
    done = 0
    while done < n:
        reply = await client.xreadgroup("g", "c", {stream: ">"}, count=100)
        ids = [entry_id for entry_id, _ in reply[0][1]] if reply else []
        if ids:
            await client.xack(stream, "g", *ids)
        done += len(ids)
    return round(n / (time.perf_counter() - start))


async def main(args: argparse.Namespace) -> None:
    runs = []
    for run in range(args.runs):
        if args.redis_url:
            runs.append(
                await one_run(
                    args.redis_url,
                    args.tasks,
                    args.rate,
                    args.seconds,
                    run,
                    None,
                    listen=args.listen,
                    processes=args.processes,
                )
            )
        else:
            with EmbeddedRedis() as server:
                pid = server.process.pid if server.process else None
                runs.append(
                    await one_run(
                        server.url,
                        args.tasks,
                        args.rate,
                        args.seconds,
                        run,
                        pid,
                        listen=args.listen,
                        processes=args.processes,
                    )
                )
        print(orjson.dumps(runs[-1]).decode(), flush=True)
    keys = [k for k in runs[0] if k != "run"]
    medians = {k: statistics.median(r[k] for r in runs) for k in keys}
    print("median " + orjson.dumps(medians).decode())


if __name__ == "__main__":
    # SIGTERM ends a run as Ctrl-C does, so that its cleanup stops the worker process and
    # the embedded Redis (the default action left them running).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--rate", type=float, default=500.0, help="offered load for the latency phase"
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the latency phase")
    parser.add_argument("--redis-url", help="default: a fresh embedded Redis per run")
    parser.add_argument(
        "--processes", type=int, default=1, help="deepagents worker --processes N (1: none)"
    )
    parser.add_argument(
        "--listen-during-drain",
        dest="listen",
        action="store_true",
        help="keep the submitting orchestrator (and its reply listener) open during the "
        "drain, as this harness did before session 9",
    )
    try:
        asyncio.run(main(parser.parse_args()))
    except KeyboardInterrupt:
        sys.exit("interrupted: the worker and the embedded Redis were stopped")
