"""Cost of instrumentation: the core benchmark with metrics and tracing on vs off.

    .venv/bin/python loadtests/bench_telemetry.py --tasks 20000 --runs 3

Runs ``bench_core``'s drain (one worker process, EchoAgent, full protocol) alternately with
telemetry ``on`` (metrics recorded, tracing on with no exporter: DEEPAGENTS_METRICS=true,
DEEPAGENTS_TRACING=true) and ``off`` (both false), so drift of the machine hits both alike.
Prints a JSON line per run and the medians per mode; the figure is drain tasks/s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_core

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import Settings
from deepagents.telemetry import configure

MODES = {
    "on": {"DEEPAGENTS_METRICS": "true", "DEEPAGENTS_TRACING": "true"},
    "off": {"DEEPAGENTS_METRICS": "false", "DEEPAGENTS_TRACING": "false"},
}
KEYS = ("drain_per_s", "worker_cpu_us_per_task", "submit_per_s", "p50_ms", "p99_ms")


async def one(mode: str, args: argparse.Namespace, run: int) -> dict[str, Any]:
    os.environ.update(MODES[mode])  # the worker process inherits them
    on = mode == "on"
    configure(Settings(metrics=on, tracing=on), "bench")  # this process's orchestrator
    with EmbeddedRedis() as server:
        pid = server.process.pid if server.process else None
        out = await bench_core.one_run(server.url, args.tasks, args.rate, args.seconds, run, pid)
    return {"mode": mode, **{k: out[k] for k in KEYS}}


async def main(args: argparse.Namespace) -> None:
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    for run in range(args.runs):
        for mode in MODES if run % 2 == 0 else reversed(list(MODES)):
            results[mode].append(await one(mode, args, run))
            print(orjson.dumps(results[mode][-1]).decode(), flush=True)
    medians = {
        m: {k: statistics.median(r[k] for r in rs) for k in KEYS} for m, rs in results.items()
    }
    slower = 1 - medians["on"]["drain_per_s"] / medians["off"]["drain_per_s"]
    print("median " + orjson.dumps(medians).decode())
    print(f"drain with telemetry on is {slower:.1%} slower than off")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=3.0, help="latency phase length")
    asyncio.run(main(parser.parse_args()))
