"""Cold start: ``import deepagents``, ``deepagents --help``, a worker from exec to its first
task, and a worker forked by ``--processes`` from its fork to ready and to its first task.

    .venv/bin/python loadtests/bench_startup.py --runs 7
    .venv/bin/python loadtests/bench_startup.py --runs 7 --before /tmp/before   # paired

``--before DIR``: another checkout of the package (``git archive <commit> deepagents agents
config | tar -x -C DIR``), measured in alternation with this one, each run of each measure
paired: the same load for both. Both run with this venv's interpreter and packages; the
tree is chosen with ``PYTHONPATH``.

1. ``python -X importtime -c "import deepagents"``: the cumulative import time of the
   package (the interpreter's own start-up excluded); the wall time of ``python -c pass``
   beside ``python -c "import deepagents"``; the wall time of ``deepagents --help``;
2. a worker process (``deepagents worker agents.echo:EchoAgent``, 3 tiers x 4 shards)
   against a private embedded Redis holding 50 queued tasks: from just before its exec to
   its first ``XREADGROUP`` and to its first commit (``EVALSHA`` of the commit script), as
   Redis's ``MONITOR`` timestamps them;
3. (this tree only) ``--processes 1``: the child is stopped (SIGSTOP), 50 tasks are queued,
   the child is killed with -9 and the supervisor forks a new one, which logs its time from
   the fork to ready (``ready_ms``) and to its first committed task (``first_task_ms``).
Prints a JSON line per measurement and the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import redis

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import Settings, load_config
from deepagents.contract import Task
from deepagents.orchestrator import Orchestrator
from deepagents.transport.redis_streams import connect

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
QUEUED = 50
_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")
CONFIG = """
tiers:
  p0: {concurrency: 20, max_wait_ms: 1000}
  p1: {concurrency: 50, max_wait_ms: 10000}
  p2: {concurrency: 100, max_wait_ms: 120000}
default_tier: p2
defaults: {shards: 4}
agents:
  echo: {class: "agents.echo:EchoAgent"}
"""
COMMIT_SHA = hashlib.sha1(
    (ROOT / "deepagents/transport/redis_streams/lua/commit.lua").read_bytes()
).hexdigest()


def _env(tree: Path, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("DEEPAGENTS_")}
    return {**base, "PYTHONPATH": str(tree), **extra}


def import_ms(tree: Path) -> float:
    """Cumulative ms of the top-level imports of ``import deepagents``."""
    done = subprocess.run(
        [PYTHON, "-X", "importtime", "-c", "import deepagents"],
        capture_output=True, text=True, check=True, cwd=tree, env=_env(tree),
    )  # fmt: skip
    top, seen_site = 0.0, False
    for match in _LINE.finditer(done.stderr):
        cumulative, depth, name = int(match.group(2)) / 1000, len(match.group(3)), match.group(4)
        if name == "site":  # the interpreter's start-up ends with site
            seen_site = True
        elif seen_site and depth == 1:  # "| " then two spaces a level
            top += cumulative
    return top


def wall_ms(tree: Path, *argv: str) -> float:
    """Wall time of ``python ARGV`` in ``tree``, the interpreter's start-up included."""
    start = time.perf_counter()
    subprocess.run([PYTHON, *argv], check=True, cwd=tree, env=_env(tree), stdout=subprocess.DEVNULL)
    return (time.perf_counter() - start) * 1000


def fill(url: str, prefix: str, config: Path, n: int = QUEUED) -> None:
    """Queue ``n`` echo tasks."""

    async def submit() -> None:
        client = connect(url)
        settings = Settings(prefix=prefix, allow_evicting_redis=True)
        async with Orchestrator.from_client(
            client, config=load_config(config), settings=settings
        ) as orch:
            await orch.submit_many([Task(intent="echo", payload={"i": i}) for i in range(n)])
        await client.aclose()

    asyncio.run(submit())


def worker_ms(tree: Path, server: EmbeddedRedis, config: Path) -> tuple[float, float]:
    """Exec to the first XREADGROUP, and exec to the first commit, of a worker started on a
    queue holding QUEUED tasks."""
    prefix = f"bs{os.getpid()}{time.monotonic_ns() % 10**6}"
    # A generous read timeout: under load a worker can take seconds to send its first command.
    client = redis.Redis.from_url(server.url, socket_timeout=120)
    env = _env(
        tree,
        DEEPAGENTS_REDIS_URL=server.url,
        DEEPAGENTS_PREFIX=prefix,
        DEEPAGENTS_CONFIG=str(config),
        DEEPAGENTS_ALLOW_EVICTING_REDIS="true",
    )
    fill(server.url, prefix, config)
    first_read = first_commit = 0.0
    with client.monitor() as monitor:  # type: ignore[no-untyped-call]
        start = time.time()
        proc = subprocess.Popen(
            [PYTHON, "-m", "deepagents", "worker", "agents.echo:EchoAgent"],
            env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            for command in monitor.listen():
                text = command["command"]
                if not first_read and text.upper().startswith("XREADGROUP") and prefix in text:
                    first_read = float(command["time"])
                if text.upper().startswith("EVALSHA") and COMMIT_SHA in text and prefix in text:
                    first_commit = float(command["time"])
                    break
        finally:
            proc.terminate()
            proc.wait(30)
    _clean(client, prefix)
    return (first_read - start) * 1000, (first_commit - start) * 1000


def _clean(client: redis.Redis, prefix: str) -> None:
    for key in client.scan_iter(match=f"{prefix}:*"):
        client.delete(key)
    client.close()


def forked_ms(server: EmbeddedRedis, config: Path, runs: int) -> list[tuple[float, float]]:
    """``(ready_ms, first_task_ms)`` of ``runs`` children forked to replace a killed one,
    each on a queue of QUEUED tasks."""
    prefix = f"bf{os.getpid()}"
    env = _env(
        ROOT,
        DEEPAGENTS_REDIS_URL=server.url,
        DEEPAGENTS_PREFIX=prefix,
        DEEPAGENTS_CONFIG=str(config),
        DEEPAGENTS_ALLOW_EVICTING_REDIS="true",
        DEEPAGENTS_LOG_FORMAT="json",
    )
    out: list[tuple[float, float]] = []
    with tempfile.TemporaryFile() as log:
        supervisor = subprocess.Popen(
            [PYTHON, "-m", "deepagents", "worker", "agents.echo:EchoAgent", "--processes", "1"],
            env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            child = _wait_for(log, "child_ready", 1)[-1]["pid"]
            for run in range(runs):
                os.kill(child, signal.SIGSTOP)
                fill(server.url, prefix, config)
                os.kill(child, signal.SIGKILL)
                first = _wait_for(log, "child_first_task", run + 1)[-1]
                ready = _wait_for(log, "child_ready", run + 2)[-1]
                out.append((ready["ready_ms"], first["first_task_ms"]))
                child = ready["pid"]
        finally:
            supervisor.send_signal(signal.SIGTERM)
            supervisor.wait(60)
    _clean(redis.Redis.from_url(server.url), prefix)
    return out


def _wait_for(log: Any, action: str, n: int, timeout: float = 120) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log.seek(0)
        found = [
            record
            for line in log.read().splitlines()
            if line.startswith(b"{") and (record := orjson.loads(line)).get("action") == action
        ]
        if len(found) >= n:
            return found
        time.sleep(0.01)
    raise RuntimeError(f"no {n} {action} lines within {timeout} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--before", type=Path, help="a checkout to compare with, paired")
    args = parser.parse_args()
    trees = {"after": ROOT} if args.before is None else {"before": args.before, "after": ROOT}
    results: dict[str, list[float]] = {}

    def record(name: str, value: float) -> None:
        results.setdefault(name, []).append(value)

    measures: dict[str, Callable[[Path], float]] = {
        "import deepagents (importtime)": import_ms,
        "wall: python -c pass": lambda tree: wall_ms(tree, "-c", "pass"),
        "wall: python -c 'import deepagents'": lambda tree: wall_ms(
            tree, "-c", "import deepagents"
        ),
        "wall: deepagents --help": lambda tree: wall_ms(tree, "-m", "deepagents", "--help"),
    }
    for _ in range(args.runs):
        for name, measure in measures.items():
            for label, tree in trees.items():
                record(f"{name} [{label}]", measure(tree))
    with tempfile.TemporaryDirectory() as tmp, EmbeddedRedis() as server:
        config = Path(tmp) / "deepagents.yaml"
        config.write_text(CONFIG)
        for _ in range(args.runs):
            for label, tree in trees.items():
                read, commit = worker_ms(tree, server, config)
                record(f"worker: exec -> first XREADGROUP [{label}]", read)
                record(f"worker: exec -> first task committed [{label}]", commit)
        for ready, first in forked_ms(server, config, args.runs):
            record("forked child: fork -> ready", ready)
            record("forked child: fork -> first task committed", first)
    for name, values in results.items():
        line: dict[str, Any] = {"measure": name, "runs_ms": [round(v, 1) for v in values]}
        line["median_ms"] = round(statistics.median(values), 1)
        line["min_ms"] = round(min(values), 1)
        sys.stdout.write(orjson.dumps(line).decode() + "\n")
    sys.stdout.write(f"load average: {os.getloadavg()}\n")


if __name__ == "__main__":
    main()
