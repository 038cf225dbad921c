"""deepagents beside peers, on the same machine in the same run: enqueue rate, drain rate,
and latency under light load.

    python3 -m venv .venv-peers
    .venv-peers/bin/pip install -r loadtests/peers/requirements.txt
    .venv/bin/python loadtests/bench_peers.py --tasks 20000 --runs 3

Per run, each system against a fresh embedded Redis, in an order that rotates from run to
run:

1. enqueue: N tasks, one call per task with the system's normal API, from one producer
   process, no worker running: tasks/s;
2. drain: start one worker process, time the drain from its first finished task to its
   last (start-up excluded, the same for all): tasks/s, the worker's CPU µs per task (its
   whole process tree) and the Redis server's;
3. latency: the worker now idle, ``--rate`` tasks/s offered (default 500) for
   ``--latency-tasks`` tasks after a warm-up of 250: enqueue call -> handler start, as the
   handler sees it (``peers/stamp.py``): p50/p95/p99 ms.

Then per run: deepagents' drain over the best peer's, and over the bare loop's.

``--only latency`` skips steps 1 and 2 (a single task, unpaced, shows the worker is up),
so that several latency runs fit in the time of one full run; the ratios per run are then
the latency's, deepagents over the bare loop.

- ``deepagents``: ``Orchestrator.submit`` per task (the drain's tasks first, then the
  paced ones); ``deepagents worker stamp_agent:StampAgent``, the full protocol
  (begin, result write, owner-checked ack and delete, outbox events, reply notification).
- ``taskiq``: taskiq-redis's ``RedisStreamBroker`` (XREADGROUP, XACK after the task), a
  no-op async task, ``taskiq worker --workers 1 --log-level WARNING`` (its default INFO
  logs a line per task); no result backend.
- ``dramatiq``: Dramatiq's ``RedisBroker``, a no-op actor, ``dramatiq --processes 1``
  (its default 8 threads); no result backend.
- ``faststream``: FastStream's ``RedisBroker`` on a Redis Stream with a consumer group
  (ack after the handler), ``faststream run``; no result.
- ``bare``: redis-py ``XADD`` per task; the worker is an ``XREADGROUP COUNT 100`` +
  ``XACK`` loop (``peers/bare_loop.py``): no result, no audit, no ownership check.

The peers run with their defaults otherwise, from their own venv (``--peers-venv``).
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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import psutil

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import Settings, parse_config
from deepagents.orchestrator import Orchestrator
from deepagents.transport.redis_streams import connect

REPO = Path(__file__).resolve().parents[1]
PEERS = Path(__file__).resolve().parent / "peers"
SYSTEMS = ("deepagents", "taskiq", "dramatiq", "faststream", "bare")
sys.path.insert(0, str(PEERS))  # the orchestrator imports the agent class, as the worker
PEER_SYSTEMS = SYSTEMS[1:4]  # "the best peer": the task queues, not the bare loop
WARMUP = 250
CONFIG = """
defaults: {shards: 4, max_backlog: 10000000, batch_size: 100}
agents: {stamp: {class: "stamp_agent:StampAgent"}}
"""


@dataclass
class Bench:
    url: str
    redis_pid: int
    n: int
    rate: float
    latency_n: int
    venv: Path
    work: Path
    latency_only: bool = False

    @property
    def lat_file(self) -> Path:
        return self.work / "latency.txt"

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "PEER_REDIS_URL": self.url,
            "PEER_LAT_FILE": str(self.lat_file),
            "PYTHONPATH": os.pathsep.join([str(PEERS), str(PEERS.parent), str(REPO)]),
        }


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def tree_cpu(procs: list[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


async def timed_drain(
    progress: Callable[[], Awaitable[int]], n: int, worker: psutil.Process, redis_pid: int
) -> dict[str, Any]:
    """From the first finished task to the last: rate, worker tree CPU, Redis CPU."""
    deadline = time.monotonic() + 120
    while (first := await progress()) == 0:
        if time.monotonic() > deadline:
            raise RuntimeError("the worker finished no task within 120 s")
        await asyncio.sleep(0.002)
    procs = [worker, *worker.children(recursive=True)]
    redis = psutil.Process(redis_pid)
    cpu0, redis0, t0 = tree_cpu(procs), tree_cpu([redis]), time.perf_counter()
    while await progress() < n:
        if time.monotonic() > deadline + 600:
            raise RuntimeError("the drain did not end within 10 minutes")
        await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - t0
    timed = n - first
    return {
        "drain_per_s": round(timed / elapsed),
        "worker_cpu_us_per_task": round((tree_cpu(procs) - cpu0) / timed * 1e6, 1),
        "redis_cpu_us_per_task": round((tree_cpu([redis]) - redis0) / timed * 1e6, 1),
    }


async def first_done(progress: Callable[[], Awaitable[int]]) -> None:
    """``--only latency``: the worker finished the one task enqueued before it started."""
    deadline = time.monotonic() + 120
    while await progress() == 0:
        if time.monotonic() > deadline:
            raise RuntimeError("the worker finished no task within 120 s")
        await asyncio.sleep(0.002)


async def latencies(bench: Bench, expect: int) -> dict[str, Any]:
    """The handler's records of the paced tasks, once all ``expect`` are in; warm-up cut."""
    deadline = time.monotonic() + 60
    while True:
        lines = bench.lat_file.read_text().split() if bench.lat_file.exists() else []
        if len(lines) >= expect:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(lines)} of {expect} paced tasks reached their handler")
        await asyncio.sleep(0.05)
    ms = [float(v) / 1000 for v in lines[WARMUP:]]
    return {f"p{q}_ms": round(pct(ms, q / 100), 2) for q in (50, 95, 99)}


# deepagents -------------------------------------------------------------------------------


async def _submit_each(orch: Orchestrator, n: int, rate: float) -> float:
    """``n`` submits, one call each, paced at ``rate`` (0: as fast as they go); tasks/s."""
    start = time.perf_counter()
    for i in range(n):
        if rate:
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        t = time.time_ns() if rate else 0
        await orch.submit({"intent": "stamp", "payload": {"i": i, "t": t}})
    return n / (time.perf_counter() - start)


def _worker(bench: Bench, prefix: str, config_path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "deepagents", "worker", "stamp_agent:StampAgent"],
        env={
            **bench.env(),
            "DEEPAGENTS_REDIS_URL": bench.url,
            "DEEPAGENTS_PREFIX": prefix,
            "DEEPAGENTS_CONFIG": str(config_path),
            "DEEPAGENTS_OUTBOX": "true",
        },
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def deepagents(bench: Bench) -> dict[str, Any]:
    prefix = f"peers{os.getpid()}"
    client = connect(bench.url)
    config_path = bench.work / "deepagents.yaml"
    config_path.write_text(CONFIG)
    settings = Settings(prefix=prefix, outbox=True)

    def orchestrator() -> Orchestrator:
        return Orchestrator.from_client(client, config=parse_config(CONFIG), settings=settings)

    # Closed during the drain: its reply listener would take every result on the cores the
    # worker and Redis share (the peers have no results), and a producer runs elsewhere.
    n = 1 if bench.latency_only else bench.n
    async with orchestrator() as orch:
        out: dict[str, Any] = {"enqueue_per_s": round(await _submit_each(orch, n, 0))}
    worker = _worker(bench, prefix, config_path)
    try:

        async def progress() -> int:
            total = 0
            for shard in range(4):
                total += await client.xlen(f"{prefix}:{{stamp:{shard}}}:p2")
            return n - total

        if bench.latency_only:
            out = {}
            await first_done(progress)
        else:
            out |= await timed_drain(progress, n, psutil.Process(worker.pid), bench.redis_pid)
        async with orchestrator() as orch:
            await _submit_each(orch, WARMUP + bench.latency_n, bench.rate)
            out |= await latencies(bench, WARMUP + bench.latency_n)
    finally:
        worker.terminate()
        worker.wait(30)
    await client.aclose()
    return out


# peers ------------------------------------------------------------------------------------


def _peer(bench: Bench, *args: str, stdout: Any = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(bench.venv / "bin" / args[0]), *args[1:]],
        cwd=PEERS,
        env=bench.env(),
        stdout=stdout,
        stderr=subprocess.DEVNULL,
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL for the whole tree: a peer's graceful stop can take its
    blocking read's timeout and more, which is not what is measured here."""
    tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        for p in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        proc.wait(10)


def _enqueue(bench: Bench, peer: str, n: int, rate: float = 0) -> dict[str, Any]:
    proc = _peer(bench, "python", "enqueue.py", peer, str(n), str(rate), stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"enqueueing for {peer} failed (exit {proc.returncode})")
    return dict(orjson.loads(out.splitlines()[-1]))


async def _peer_run(
    bench: Bench, peer: str, worker_args: tuple[str, ...], progress: Callable[[Any], Awaitable[int]]
) -> dict[str, Any]:
    n = 1 if bench.latency_only else bench.n
    out = _enqueue(bench, peer, n)
    client = connect(bench.url)
    worker = _peer(bench, *worker_args)
    try:
        if bench.latency_only:
            out = {}
            await first_done(lambda: progress(client))
        else:
            out |= await timed_drain(
                lambda: progress(client), n, psutil.Process(worker.pid), bench.redis_pid
            )
        _enqueue(bench, peer, WARMUP + bench.latency_n, bench.rate)
        out |= await latencies(bench, WARMUP + bench.latency_n)
    finally:
        _stop(worker)
        await client.aclose()
    return out


async def _group_done(client: Any, stream: str, group: str) -> int:
    """Entries read by the group and acked."""
    for info in await client.xinfo_groups(stream):
        if info["name"] == group.encode():
            return int(info["entries-read"] or 0) - int(info["pending"])
    return 0


async def taskiq(bench: Bench) -> dict[str, Any]:
    # Its default INFO level logs a line per task: a production worker would not.
    args = ("taskiq", "worker", "taskiq_noop:broker", "--workers", "1", "--log-level", "WARNING")
    return await _peer_run(bench, "taskiq", args, lambda c: _group_done(c, "taskiq", "taskiq"))


async def dramatiq(bench: Bench) -> dict[str, Any]:
    n = 1 if bench.latency_only else bench.n

    async def progress(client: Any) -> int:  # a message leaves its hash when it is acked
        return n - int(await client.hlen("dramatiq:default.msgs"))

    args = ("dramatiq", "dramatiq_noop", "--processes", "1")
    return await _peer_run(bench, "dramatiq", args, progress)


async def faststream(bench: Bench) -> dict[str, Any]:
    args = ("faststream", "run", "faststream_noop:app", "--log-level", "warning")
    return await _peer_run(
        bench, "faststream", args, lambda c: _group_done(c, "faststream", "faststream")
    )


async def bare(bench: Bench) -> dict[str, Any]:
    return await _peer_run(
        bench, "bare", ("python", "bare_loop.py"), lambda c: _group_done(c, "bare", "bare")
    )


MEASURE = {
    "deepagents": deepagents,
    "taskiq": taskiq,
    "dramatiq": dramatiq,
    "faststream": faststream,
    "bare": bare,
}


def main(args: argparse.Namespace) -> None:
    venv = Path(args.peers_venv).resolve()
    for tool in ("taskiq", "dramatiq", "faststream"):
        if not (venv / "bin" / tool).exists():
            sys.exit(f"no {tool} in the peers venv at {venv}: see this script's docstring")
    systems = args.systems.split(",") if args.systems else list(SYSTEMS)
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    for run in range(args.runs):
        order = systems[run % len(systems) :] + systems[: run % len(systems)]
        for system in order:
            with EmbeddedRedis() as server, tempfile.TemporaryDirectory() as work:
                assert server.process is not None
                bench = Bench(
                    server.url,
                    server.process.pid,
                    args.tasks,
                    args.rate,
                    args.latency_tasks,
                    venv,
                    Path(work),
                    latency_only=args.only == "latency",
                )
                out = asyncio.run(MEASURE[system](bench))
            runs[system].append(out)
            print(orjson.dumps({"run": run, "system": system, **out}).decode(), flush=True)
    for system in systems:
        medians = {k: statistics.median(r[k] for r in runs[system]) for k in runs[system][0]}
        spread = {
            k: [min(r[k] for r in runs[system]), max(r[k] for r in runs[system])]
            for k in runs[system][0]
        }
        print(f"median {system} " + orjson.dumps(medians).decode())
        print(f"range  {system} " + orjson.dumps(spread).decode())
    if args.only == "latency":
        _latency_ratios(runs, args.runs)
        return
    peers = [p for p in PEER_SYSTEMS if p in runs]
    if "deepagents" not in runs or not peers:
        return
    # Within a run the systems met the same machine: the ratios are steadier than the rates.
    for key in ("drain_per_s", "enqueue_per_s"):
        ratios = [
            runs["deepagents"][i][key] / max(runs[p][i][key] for p in peers)
            for i in range(args.runs)
        ]
        print(
            f"deepagents / best peer, {key}, per run: "
            + ", ".join(f"{r:.2f}" for r in ratios)
            + f" (median {statistics.median(ratios):.2f})"
        )
    if "bare" in runs:
        ratios = [
            runs["deepagents"][i]["drain_per_s"] / runs["bare"][i]["drain_per_s"]
            for i in range(args.runs)
        ]
        print(
            "deepagents / bare loop, drain_per_s, per run: " + ", ".join(f"{r:.2f}" for r in ratios)
        )


def _latency_ratios(runs: dict[str, list[dict[str, Any]]], n: int) -> None:
    """Per run, deepagents' latency over the bare loop's (and FastStream's): the machine is
    shared, so only figures of one run compare."""
    if "deepagents" not in runs:
        return
    for other in ("bare", "faststream"):
        if other not in runs:
            continue
        for key in ("p50_ms", "p99_ms"):
            ratios = [runs["deepagents"][i][key] / runs[other][i][key] for i in range(n)]
            print(
                f"deepagents / {other}, {key}, per run: "
                + ", ".join(f"{r:.2f}" for r in ratios)
                + f" (median {statistics.median(ratios):.2f})"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=500.0, help="offered tasks/s (latency)")
    parser.add_argument("--latency-tasks", type=int, default=2_000)
    parser.add_argument("--systems", default="", help="comma-separated subset (default: all)")
    parser.add_argument("--peers-venv", default=".venv-peers")
    parser.add_argument(
        "--only", choices=("latency",), help="latency: skip the enqueue and drain steps"
    )
    main(parser.parse_args())
