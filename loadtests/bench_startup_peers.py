"""Start-up beside the peers: each worker from just before its exec to the start of its first
task, on a queue filled before it starts, in one run, in an order that rotates from run to run.

    python3 -m venv .venv-peers
    .venv-peers/bin/pip install -r loadtests/peers/requirements.txt
    .venv/bin/python loadtests/bench_startup_peers.py --runs 7

- ``deepagents``: ``deepagents worker stamp_agent:StampAgent`` (3 tiers x 4 shards);
- ``arq``: ``arq arq_noop.WorkerSettings``;
- ``celery``: ``celery -A celery_noop worker -P solo`` without mingle, gossip and heartbeat
  (the events a lone worker waits on or sends at start: its fastest start);
- ``taskiq``: ``taskiq worker taskiq_noop:broker --workers 1`` (a supervisor and one child);
- ``dramatiq``, ``faststream``, ``bare``: as in ``bench_peers.py``.

Each task is stamped so its handler records its own wall clock (``peers/enqueue.py
wallclock``, ``peers/stamp.py``); the figure is that time minus the wall clock just before
``Popen``. One private embedded Redis, emptied between runs. Prints a JSON line per
measurement and the medians.
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
import redis

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import Settings, parse_config
from deepagents.contract import Task
from deepagents.orchestrator import Orchestrator
from deepagents.transport.redis_streams import connect

REPO = Path(__file__).resolve().parents[1]
PEERS = Path(__file__).resolve().parent / "peers"
sys.path.insert(0, str(PEERS))  # the orchestrator imports the agent class, as the worker
QUEUED = 50
CONFIG = """
defaults: {shards: 4}
agents: {stamp: {class: "stamp_agent:StampAgent"}}
"""
# The worker's command line per system (deepagents' runs in this venv, the rest in theirs).
WORKERS: dict[str, tuple[str, ...]] = {
    "deepagents": ("deepagents", "worker", "stamp_agent:StampAgent"),
    "arq": ("arq", "arq_noop.WorkerSettings"),
    "celery": (
        "celery", "-A", "celery_noop", "worker", "-P", "solo", "--loglevel", "WARNING",
        "--without-mingle", "--without-gossip", "--without-heartbeat",
    ),
    "taskiq": (
        "taskiq", "worker", "taskiq_noop:broker", "--workers", "1", "--log-level", "WARNING",
    ),
    "dramatiq": ("dramatiq", "dramatiq_noop", "--processes", "1"),
    "faststream": ("faststream", "run", "faststream_noop:app", "--log-level", "warning"),
    "bare": ("python", "bare_loop.py"),
}  # fmt: skip


def env(url: str, stamps: Path, config: Path) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("DEEPAGENTS_")},
        "PEER_REDIS_URL": url,
        "PEER_LAT_FILE": str(stamps),
        "DEEPAGENTS_REDIS_URL": url,
        "DEEPAGENTS_PREFIX": "startup",
        "DEEPAGENTS_CONFIG": str(config),
        "DEEPAGENTS_ALLOW_EVICTING_REDIS": "true",
        "PYTHONPATH": os.pathsep.join([str(PEERS), str(REPO)]),
    }


async def fill_deepagents(url: str) -> None:
    client = connect(url)
    settings = Settings(prefix="startup", allow_evicting_redis=True)
    async with Orchestrator.from_client(
        client, config=parse_config(CONFIG), settings=settings
    ) as orch:
        tasks = [Task(intent="stamp", payload={"i": i, "t": 1}) for i in range(QUEUED)]
        await orch.submit_many(tasks)
    await client.aclose()


def fill(system: str, url: str, environ: dict[str, str], venv: Path) -> None:
    if system == "deepagents":
        asyncio.run(fill_deepagents(url))
        return
    subprocess.run(
        [str(venv / "bin" / "python"), "enqueue.py", system, str(QUEUED), "wallclock"],
        cwd=PEERS, env=environ, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip


def command(system: str, venv: Path) -> list[str]:
    program, *args = WORKERS[system]
    if system == "deepagents":
        return [sys.executable, "-m", "deepagents", *args]
    return [str(venv / "bin" / program), *args]


def first_task_ms(system: str, url: str, venv: Path, work: Path) -> float:
    """Exec of ``system``'s worker to the start of its first task, ms."""
    redis.Redis.from_url(url).flushall()
    stamps, config = work / "stamps.txt", work / "deepagents.yaml"
    stamps.unlink(missing_ok=True)
    config.write_text(CONFIG)
    environ = env(url, stamps, config)
    fill(system, url, environ, venv)
    start_us = time.time_ns() / 1000
    cwd = REPO if system == "deepagents" else PEERS
    proc = subprocess.Popen(
        command(system, venv), cwd=cwd, env=environ,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (stamps.exists() and stamps.read_text().strip()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{system}: no task started (exit {proc.poll()}): {proc.args!r}")
            time.sleep(0.005)
        first_us = min(float(v) for v in stamps.read_text().split())
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)  # the whole tree: a graceful stop is not what is measured
        proc.wait(30)
    return (first_us - start_us) / 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--peers-venv", type=Path, default=REPO / ".venv-peers")
    parser.add_argument("--systems", default="deepagents,arq,celery,taskiq")
    args = parser.parse_args()
    systems = args.systems.split(",")
    results: dict[str, list[float]] = {s: [] for s in systems}
    with tempfile.TemporaryDirectory() as tmp, EmbeddedRedis() as server:
        for run in range(args.runs):
            order = systems[run % len(systems) :] + systems[: run % len(systems)]
            for system in order:
                ms = first_task_ms(system, server.url, args.peers_venv, Path(tmp))
                results[system].append(ms)
    for system, values in results.items():
        line: dict[str, Any] = {"system": system, "runs_ms": [round(v, 1) for v in values]}
        line["median_ms"] = round(statistics.median(values), 1)
        line["min_ms"] = round(min(values), 1)
        print(orjson.dumps(line).decode())
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
