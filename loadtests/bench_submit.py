"""Submit rate from one producer process, three ways, against a fresh embedded Redis:

    .venv/bin/python loadtests/bench_submit.py seq 4000     # await orch.submit(dict), one by one
    .venv/bin/python loadtests/bench_submit.py conc 20000   # 64 orch.submit calls in flight
    .venv/bin/python loadtests/bench_submit.py many 50000   # submit_many, 500 Tasks a call

To compare two trees, run it with ``PYTHONPATH`` set to each, alternating. The outbox is on
(each task's ``submitted`` audit event is written with it), as in production. Prints one
JSON line: the mode, tasks/s, µs per task (wall clock) and the producer's CPU µs per
task (``process_time``: less moved by other load on a shared machine than wall clock), and
Redis's CPU µs per task (its ``INFO cpu`` around the same loop): the two sides of a submit;
and Redis's own time per task by command (``INFO commandstats``, reset before the loop).
A script's time includes the commands it calls, which are also counted under their names:
the script's own overhead is its time less theirs.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import orjson

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import Settings, parse_config
from deepagents.contract import Task
from deepagents.orchestrator import Orchestrator
from deepagents.transport.redis_streams import connect

CONFIG = """
defaults: {shards: 4, max_backlog: 10000000}
agents: {echo: {class: "agents.echo:EchoAgent"}}
"""
WARMUP = 200
IN_FLIGHT = 64
BATCH = 500


async def run(url: str, mode: str, n: int) -> tuple[float, float, float, dict[str, float]]:
    client = connect(url)
    settings = Settings(prefix="bench-submit", outbox=True)
    async with Orchestrator.from_client(
        client, config=parse_config(CONFIG), settings=settings
    ) as orch:
        for i in range(WARMUP):  # connections, scripts loaded
            await orch.submit({"intent": "echo", "payload": {"i": i}})
        redis_cpu = await _redis_cpu(client)
        await client.config_resetstat()
        start, cpu = time.perf_counter(), time.process_time()
        if mode == "seq":
            for i in range(n):
                await orch.submit({"intent": "echo", "payload": {"i": i}})
        elif mode == "conc":
            slots = asyncio.Semaphore(IN_FLIGHT)

            async def one(i: int) -> None:
                async with slots:
                    await orch.submit({"intent": "echo", "payload": {"i": i}})

            await asyncio.gather(*(one(i) for i in range(n)))
        else:
            for i in range(0, n, BATCH):
                await orch.submit_many(
                    [Task(intent="echo", payload={"i": j}) for j in range(i, min(n, i + BATCH))]
                )
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        redis_cpu = await _redis_cpu(client) - redis_cpu
        commands = await _command_us(client, n)
    await client.aclose()
    return elapsed, cpu, redis_cpu, commands


async def _redis_cpu(client: Any) -> float:
    info = await client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def _command_us(client: Any, n: int) -> dict[str, float]:
    """Redis's µs per task by command, the largest first (the INFO calls left out)."""
    stats = await client.info("commandstats")
    per_task = {
        name.removeprefix("cmdstat_"): round(float(stat["usec"]) / n, 2)
        for name, stat in stats.items()
        if not name.startswith(("cmdstat_info", "cmdstat_config"))
    }
    return dict(sorted(per_task.items(), key=lambda kv: -kv[1]))


def main() -> None:
    mode, n = sys.argv[1], int(sys.argv[2])
    if mode not in ("seq", "conc", "many"):
        sys.exit(f"unknown mode {mode!r}: seq, conc or many")
    with EmbeddedRedis() as server:
        elapsed, cpu, redis_cpu, commands = asyncio.run(run(server.url, mode, n))
    line = {
        "mode": mode,
        "tasks": n,
        "per_s": round(n / elapsed),
        "us_per_task": round(elapsed / n * 1e6, 1),
        "cpu_us_per_task": round(cpu / n * 1e6, 1),
        "redis_cpu_us_per_task": round(redis_cpu / n * 1e6, 1),
        "redis_us_per_task_by_command": commands,
    }
    print(orjson.dumps(line).decode())


if __name__ == "__main__":
    main()
