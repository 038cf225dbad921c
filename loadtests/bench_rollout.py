"""What a rollout costs: (1) CPU per routed task, the router with the rollout hook against
the router without one (the same tasks, rounds alternating so machine drift hits both);
(2) how long a rollback's move takes for a backlog of unstarted canary tasks, on Redis.

    .venv/bin/python loadtests/bench_rollout.py [--redis-url URL] [--tasks 20000]

Default: a fresh embedded Redis. Prints medians of five routing rounds and three moves.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's package

from redis_target import bench_main

from deepagents.config import FileConfig
from deepagents.contract import Task
from deepagents.orchestrator.routing import Router, agent_specs
from deepagents.orchestrator.versions import VersionRouting
from deepagents.store.memory_registry import MemoryRegistry
from deepagents.store.memory_rollouts import MemoryRollouts
from deepagents.transport.base import Enqueue, StreamRef
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams import RedisStreamBus, connect

AGENTS = {"echo": {"class": "agents.echo:EchoAgent"}}
PLAIN = FileConfig.model_validate({"agents": AGENTS})
ROLLOUT = FileConfig.model_validate(
    {"agents": AGENTS, "rollouts": {"echo": {"stable": "1.0.0", "canary": "1.1.0"}}}
)


def route_us(router: Router, tasks: list[Task]) -> float:
    start = time.perf_counter()
    for task in tasks:
        router.route(task)
    return (time.perf_counter() - start) / len(tasks) * 1e6


async def routing(tasks: list[Task]) -> None:
    keys = Keys("bench")
    plain = Router(PLAIN, agent_specs(PLAIN), keys)
    versions = VersionRouting(ROLLOUT, MemoryRollouts(MemoryRegistry()))
    await versions.refresh()
    hooked = Router(ROLLOUT, agent_specs(ROLLOUT), keys, versions)
    rounds: dict[str, list[float]] = {"without": [], "with": []}
    for _ in range(5):
        rounds["without"].append(route_us(plain, tasks))
        rounds["with"].append(route_us(hooked, tasks))
    for name, figures in rounds.items():
        runs = " · ".join(f"{f:.2f}" for f in figures)
        median = statistics.median(figures)
        print(f"route() {name} the rollout hook: µs/task {runs}; median {median:.2f}")


async def moving(url: str, n: int) -> None:
    client = connect(url)
    bus = RedisStreamBus(client, result_ttl_s=60)
    keys = Keys(f"bench-rollout-{time.time_ns()}")
    canary = StreamRef(keys.shard("echo", 0, "1.1.0"), "p2")
    stable = StreamRef(keys.shard("echo", 0, "1.0.0"), "p2")
    took = []
    try:
        for _ in range(3):
            items = [Enqueue(canary, f"t{i}", b'{"task_id": "t%d"}' % i) for i in range(n)]
            for i in range(0, n, 1_000):
                await bus.enqueue_many(items[i : i + 1_000], max_backlog=10 * n)
            start = time.perf_counter()
            moved = await bus.move_unstarted(canary, stable, "echo")
            took.append(time.perf_counter() - start)
            assert moved.entries == n, moved
            await client.delete(
                stable.name, canary.name, *(canary.keys.task(f"t{i}") for i in range(n))
            )
        runs = " · ".join(f"{t * 1000:.0f}" for t in took)
        median = statistics.median(took)
        rate = n / median
        print(f"move {n} unstarted entries: ms {runs}; median {median * 1000:.0f} ({rate:,.0f}/s)")
    finally:
        await bus.aclose()
        await client.aclose()


async def measure(url: str, n: int) -> None:
    await routing([Task(intent="echo", payload={"i": i}) for i in range(n)])
    await moving(url, n)


if __name__ == "__main__":
    bench_main(__doc__, "tasks", 20_000, measure)
