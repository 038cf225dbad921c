"""Drain rate beside peers, on the same machine in the same run: the yardstick the core
issue gives ("the best Python task queues ... drain about 1,800 no-op tasks/s with one
worker process") measured here rather than quoted.

    python3 -m venv .venv-peers
    .venv-peers/bin/pip install -r loadtests/peers/requirements.txt
    .venv/bin/python loadtests/bench_peers.py --tasks 20000 --runs 3

Per run, each system against a fresh embedded Redis, in an order that rotates from run to
run: enqueue N tasks with no worker running, start one worker process, and time the
drain from its first finished task to its last (start-up excluded, the same for all).
Reported: tasks/s, the worker's CPU µs per task (its whole process tree) and the Redis
server's, and per run deepagents' drain over the best peer's.

- ``deepagents``: ``deepagents worker agents.echo:EchoAgent``, the full protocol (begin,
  result write, owner-checked ack and delete, outbox events), as ``bench_core.py``.
- ``taskiq``: taskiq-redis's ``RedisStreamBroker`` (XREADGROUP, XACK after the task), a
  no-op async task, ``taskiq worker --workers 1 --log-level WARNING`` (its default INFO
  logs a line per task); no result backend.
- ``dramatiq``: Dramatiq's ``RedisBroker``, a no-op actor, ``dramatiq --processes 1``
  (its default 8 threads); no result backend.

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
from pathlib import Path
from typing import Any

import orjson
import psutil
from bench_core import CONFIG, backlog, start_worker

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import Settings, parse_config
from deepagents.contract import Task
from deepagents.orchestrator import Orchestrator
from deepagents.transport.redis_streams import connect

PEERS = Path(__file__).resolve().parent / "peers"
SYSTEMS = ("deepagents", "taskiq", "dramatiq")


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


async def deepagents(url: str, redis_pid: int, n: int, _venv: Path) -> dict[str, Any]:
    prefix = f"peers{os.getpid()}"
    client = connect(url)
    config = parse_config(CONFIG)
    async with Orchestrator.from_client(
        client, config=config, settings=Settings(prefix=prefix)
    ) as orch:
        for i in range(0, n, 500):
            await orch.submit_many(
                [Task(intent="echo", payload={"i": j}) for j in range(i, min(n, i + 500))]
            )
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(CONFIG)
    worker = start_worker(url, prefix, f.name)
    try:

        async def progress() -> int:
            return n - await backlog(client, prefix)

        return await timed_drain(progress, n, psutil.Process(worker.pid), redis_pid)
    finally:
        worker.terminate()
        worker.wait(30)
        os.unlink(f.name)
        await client.aclose()


def _peer(venv: Path, url: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(venv / "bin" / args[0]), *args[1:]],
        cwd=PEERS,
        env={**os.environ, "PEER_REDIS_URL": url, "PYTHONPATH": str(PEERS)},
        stdout=subprocess.DEVNULL,
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


def _enqueue(venv: Path, url: str, peer: str, n: int) -> None:
    code = _peer(venv, url, "python", "enqueue.py", peer, str(n)).wait(600)
    if code != 0:
        raise RuntimeError(f"enqueueing for {peer} failed (exit {code})")


async def taskiq(url: str, redis_pid: int, n: int, venv: Path) -> dict[str, Any]:
    _enqueue(venv, url, "taskiq", n)
    client = connect(url)
    # Its default INFO level logs a line per task: a production worker would not.
    args = ("taskiq_noop:broker", "--workers", "1", "--log-level", "WARNING")
    worker = _peer(venv, url, "taskiq", "worker", *args)
    try:

        async def progress() -> int:  # read by the group and acked
            (group,) = await client.xinfo_groups("taskiq")
            return int(group["entries-read"] or 0) - int(group["pending"])

        return await timed_drain(progress, n, psutil.Process(worker.pid), redis_pid)
    finally:
        _stop(worker)
        await client.aclose()


async def dramatiq(url: str, redis_pid: int, n: int, venv: Path) -> dict[str, Any]:
    _enqueue(venv, url, "dramatiq", n)
    client = connect(url)
    worker = _peer(venv, url, "dramatiq", "dramatiq_noop", "--processes", "1")
    try:

        async def progress() -> int:  # a message leaves its hash when it is acked
            return n - int(await client.hlen("dramatiq:default.msgs"))

        return await timed_drain(progress, n, psutil.Process(worker.pid), redis_pid)
    finally:
        _stop(worker)
        await client.aclose()


MEASURE = {"deepagents": deepagents, "taskiq": taskiq, "dramatiq": dramatiq}


def main(args: argparse.Namespace) -> None:
    venv = Path(args.peers_venv).resolve()
    if not (venv / "bin" / "taskiq").exists() or not (venv / "bin" / "dramatiq").exists():
        sys.exit(f"no peers venv at {venv}: see this script's docstring")
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SYSTEMS}
    for run in range(args.runs):
        order = SYSTEMS[run % 3 :] + SYSTEMS[: run % 3]
        for system in order:
            with EmbeddedRedis() as server:
                assert server.process is not None
                measure = MEASURE[system](server.url, server.process.pid, args.tasks, venv)
                out = asyncio.run(measure)
            runs[system].append(out)
            print(orjson.dumps({"run": run, "system": system, **out}).decode(), flush=True)
    for system in SYSTEMS:
        medians = {k: statistics.median(r[k] for r in runs[system]) for k in runs[system][0]}
        print(f"median {system} " + orjson.dumps(medians).decode())
    # Within a run the three met the same machine: the ratio is steadier than the rates.
    ratios = [
        runs["deepagents"][i]["drain_per_s"]
        / max(runs["taskiq"][i]["drain_per_s"], runs["dramatiq"][i]["drain_per_s"])
        for i in range(args.runs)
    ]
    print(
        "deepagents / best peer, per run: "
        + ", ".join(f"{r:.1f}" for r in ratios)
        + f" (median {statistics.median(ratios):.1f})"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--peers-venv", default=".venv-peers")
    main(parser.parse_args())
