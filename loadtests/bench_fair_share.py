"""Fair share inside a tier: what it costs a drain, and how fair it is.

Drain: ``--tasks`` p2 tasks of ten tenants (A-J, equal shares, submitted tenant after tenant)
queued with the worker stopped, then one in-process ``Worker`` (a no-op agent, one shard)
started; the time from its start until the last task has run. Each round runs the tier
with ``fair_share`` on and off, in alternating order, each on keys of its own; prints the
medians and the loss (fair / plain - 1).

Fairness: tenant A's 10,000 tasks, then 10 of each of B-J, queued; Jain's index over the
tasks started per tenant among the first 100 starts (every tenant still has tasks queued
there: 1.0 is ten each, 0.1 is A alone), with fair share on and off.

    .venv/bin/python loadtests/bench_fair_share.py --rounds 5

Runs a redis-server of its own (``--url`` to use another), so its ``INFO commandstats``
count this run alone: the server's time per task drained (``redis_us_per_task``) and the
worker process's CPU time per task are the parts of the cost the machine's other load blurs
less than the wall clock. Each run uses its own key prefix
and deletes its keys afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections import Counter
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from deepagents import AgentContract, Result
from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import Settings, parse_config
from deepagents.contract import Task
from deepagents.orchestrator import Orchestrator
from deepagents.transport.redis_streams import connect
from deepagents.worker import Worker

CONFIG = """
tiers:
  p0: {{concurrency: 20}}
  p2: {{concurrency: 100, fair_share: {fair}}}
default_tier: p2
defaults: {{shards: 1}}
agents:
  noop: {{class: "loadtests.bench_fair_share:NoopAgent"}}
"""


class NoopAgent(AgentContract):
    """Does nothing; counts its starts per tenant, in order, and says when ``until`` ran."""

    name = "noop"
    version = "1.0.0"
    intents = ("noop",)

    def __init__(self, until: int) -> None:
        self.started: list[str] = []
        self.until = until
        self.done = asyncio.Event()

    async def execute(self, context: dict[str, Any]) -> Result:
        self.started.append(context["task"].tenant or "")
        if len(self.started) >= self.until:
            self.done.set()
        return Result(output=None)


async def _once(url: str, fair: bool, tasks: list[Task], until: int, tag: str) -> NoopAgent:
    """Queue ``tasks``, run a worker until ``until`` of them started; its agent."""
    config = parse_config(CONFIG.format(fair="true" if fair else "false"))
    prefix = f"fair{os.getpid()}{tag}"
    settings = Settings(redis_url=url, prefix=prefix)
    client = connect(url)
    agent = NoopAgent(until)
    try:
        async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
            for i in range(0, len(tasks), 1_000):
                await orch.submit_many(tasks[i : i + 1_000])
        worker = Worker.from_client(agent, client=client, config=config, settings=settings)
        await client.config_resetstat()
        running = asyncio.create_task(worker.run())
        await worker.ready.wait()
        agent.started_at = time.perf_counter()  # type: ignore[attr-defined]
        cpu = time.process_time()
        await asyncio.wait_for(agent.done.wait(), 600)
        agent.took = time.perf_counter() - agent.started_at  # type: ignore[attr-defined]
        agent.cpu = time.process_time() - cpu  # type: ignore[attr-defined]
        stats = await client.info("commandstats")
        agent.redis_us = sum(v["usec"] for v in stats.values())  # type: ignore[attr-defined]
        agent.stats = stats  # type: ignore[attr-defined]
        worker.stop()
        await running
    finally:
        async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            await client.delete(key)
        await client.aclose()
    return agent


def jain(counts: list[int]) -> float:
    return sum(counts) ** 2 / (len(counts) * sum(c * c for c in counts))


async def run(url: str, n: int, rounds: int) -> dict[str, Any]:
    tenants = "ABCDEFGHIJ"
    drains: dict[bool, list[float]] = {True: [], False: []}
    server_us: dict[bool, list[float]] = {True: [], False: []}
    worker_us: dict[bool, list[float]] = {True: [], False: []}
    for r in range(rounds):
        for fair in (True, False) if r % 2 == 0 else (False, True):
            tasks = [Task(intent="noop", tenant=t) for t in tenants for _ in range(n // 10)]
            agent = await _once(url, fair, tasks, len(tasks), f"d{r}{int(fair)}")
            drains[fair].append(agent.took)  # type: ignore[attr-defined]
            server_us[fair].append(agent.redis_us / len(tasks))  # type: ignore[attr-defined]
            worker_us[fair].append(agent.cpu * 1e6 / len(tasks))  # type: ignore[attr-defined]
    flood = [Task(intent="noop", tenant="A") for _ in range(10_000)]
    flood += [Task(intent="noop", tenant=t) for t in tenants[1:] for _ in range(10)]
    index = {}
    for fair in (True, False):
        agent = await _once(url, fair, flood, 100, f"j{int(fair)}")
        counts = Counter(agent.started[:100])
        index[fair] = round(jain([counts.get(t, 0) for t in tenants]), 3)
    fair_s, plain_s = statistics.median(drains[True]), statistics.median(drains[False])
    pairs = [f / p for f, p in zip(drains[True], drains[False], strict=True)]
    return {
        "tasks": n,
        "rounds": rounds,
        "drain_fair_s": [round(x, 3) for x in drains[True]],
        "drain_plain_s": [round(x, 3) for x in drains[False]],
        "median_fair_s": round(fair_s, 3),
        "median_plain_s": round(plain_s, 3),
        "loss": f"{(fair_s / plain_s - 1) * 100:+.1f}%",
        # Each round's pair (same moment, same load), then their median: steadier than the
        # ratio of the medians on a loaded machine.
        "loss_paired_median": f"{(statistics.median(pairs) - 1) * 100:+.1f}%",
        "redis_us_per_task_fair": round(statistics.median(server_us[True]), 1),
        "redis_us_per_task_plain": round(statistics.median(server_us[False]), 1),
        "worker_cpu_us_per_task_fair": round(statistics.median(worker_us[True]), 1),
        "worker_cpu_us_per_task_plain": round(statistics.median(worker_us[False]), 1),
        "jain_first_100_fair": index[True],
        "jain_first_100_plain": index[False],
        "loadavg": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a Redis to use (default: one of its own)")
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.url:
        print(asyncio.run(run(args.url, args.tasks, args.rounds)))
        return
    with EmbeddedRedis() as server:
        print(asyncio.run(run(server.url, args.tasks, args.rounds)))


if __name__ == "__main__":
    main()
