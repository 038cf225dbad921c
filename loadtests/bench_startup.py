"""Cold start: the import time of ``deepagents`` and a worker's start-up to its first read.

    .venv/bin/python loadtests/bench_startup.py --runs 5

1. ``python -X importtime -c "import deepagents"``: the cumulative import time of the
   package (the interpreter's own start-up excluded), and the heaviest packages under it;
   the same for ``deepagents.cli.main`` with its parser built (what every command pays);
   and the wall time of ``python -c pass`` beside ``python -c "import deepagents"``;
2. a worker process (``deepagents worker agents.echo:EchoAgent``) against a private
   embedded Redis: from just before its exec to its first XREADGROUP, as Redis's MONITOR
   timestamps it (the worker is then serving).
Prints a JSON line per measurement and the medians.
"""

from __future__ import annotations

import argparse
import os
import re
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

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
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


def import_profile(code: str) -> tuple[float, list[tuple[str, float]]]:
    """Cumulative ms of the top-level imports ``code`` makes, and the heaviest packages
    (not the standard library's) among everything they import."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    top, heavy = 0.0, []
    seen_site = False
    for match in _LINE.finditer(done.stderr):
        cumulative, depth, name = int(match.group(2)) / 1000, len(match.group(3)), match.group(4)
        if name == "site":  # the interpreter's start-up ends with site
            seen_site = True
            continue
        if seen_site and depth == 1:
            top += cumulative
        if seen_site and "." not in name and name not in sys.stdlib_module_names:
            heavy.append((name, cumulative))  # a dependency's root package, all it imports
    return top, sorted(heavy, key=lambda h: -h[1])[:8]


def wall_ms(code: str) -> float:
    """Wall time of ``python -c code``, the interpreter's start-up included."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    return (time.perf_counter() - start) * 1000


def worker_first_read_ms(server: EmbeddedRedis, config: Path) -> float:
    prefix = f"bs{os.getpid()}{time.monotonic_ns() % 10**6}"
    client = redis.Redis.from_url(server.url)
    env = {
        **os.environ,
        "DEEPAGENTS_REDIS_URL": server.url,
        "DEEPAGENTS_PREFIX": prefix,
        "DEEPAGENTS_CONFIG": str(config),
        "DEEPAGENTS_ALLOW_EVICTING_REDIS": "true",
    }
    with client.monitor() as monitor:  # type: ignore[no-untyped-call]
        start = time.time()
        proc = subprocess.Popen(
            [str(BIN / "deepagents"), "worker", "agents.echo:EchoAgent"],
            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            for command in monitor.listen():
                if (
                    command["command"].upper().startswith("XREADGROUP")
                    and prefix in command["command"]
                ):
                    first = float(command["time"])
                    break
        finally:
            proc.terminate()
            proc.wait(30)
    for key in client.scan_iter(match=f"{prefix}:*"):
        client.delete(key)
    client.close()
    return (first - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    results: dict[str, list[float]] = {
        "import deepagents": [],
        "cli parser": [],
        "wall: python -c pass": [],
        "wall: python -c 'import deepagents'": [],
        "worker": [],
    }
    heaviest: dict[str, Any] = {}
    for _ in range(args.runs):
        ms, heaviest["import deepagents"] = import_profile("import deepagents")
        results["import deepagents"].append(ms)
        ms, heaviest["cli parser"] = import_profile(
            "from deepagents.cli.main import build_parser; build_parser()"
        )
        results["cli parser"].append(ms)
        results["wall: python -c pass"].append(wall_ms("pass"))
        results["wall: python -c 'import deepagents'"].append(wall_ms("import deepagents"))
    with tempfile.TemporaryDirectory() as tmp, EmbeddedRedis() as server:
        config = Path(tmp) / "deepagents.yaml"
        config.write_text(CONFIG)
        for _ in range(args.runs):
            results["worker"].append(worker_first_read_ms(server, config))
    for name, values in results.items():
        line: dict[str, Any] = {"measure": name, "runs_ms": [round(v, 1) for v in values]}
        line["median_ms"] = round(statistics.median(values), 1)
        line["min_ms"] = round(min(values), 1)
        if name in heaviest:
            line["heaviest_ms"] = {n: round(v, 1) for n, v in heaviest[name]}
        sys.stdout.write(orjson.dumps(line).decode() + "\n")


if __name__ == "__main__":
    main()
