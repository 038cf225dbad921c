"""Tasks for later at scale: Redis memory per scheduled task, and how late they start with
100,000 scheduled.

Submits ``--tasks`` tasks (a small payload) with ``not_before`` spread evenly over
``--spread`` seconds starting ``--lead`` seconds ahead (enough for the submit to finish),
on a redis-server of its own; reads ``used_memory`` before and after (per task: its delayed
member, its task hash and its location record), then runs one in-process worker (a no-op
agent, one shard) and, once every task has run, reads the lateness (``started_ms`` the
begin script records minus ``not_before``) of every 50th task: p50, p99, max, early.

    .venv/bin/python loadtests/bench_scheduled.py --tasks 100000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from datetime import UTC, datetime
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
defaults: {shards: 1}
agents:
  noop: {class: "loadtests.bench_scheduled:NoopAgent"}
"""


class NoopAgent(AgentContract):
    name = "noop"
    version = "1.0.0"
    intents = ("noop",)

    def __init__(self, total: int) -> None:
        self.total, self.ran = total, 0
        self.done = asyncio.Event()

    async def execute(self, context: dict[str, Any]) -> Result:
        self.ran += 1
        if self.ran >= self.total:
            self.done.set()
        return Result(output=None)


async def run(url: str, n: int, lead_s: float, spread_s: float) -> dict[str, Any]:
    config = parse_config(CONFIG)
    settings = Settings(redis_url=url, prefix="sched")
    client = connect(url)
    start = time.time() + lead_s
    tasks = [
        Task(
            intent="noop",
            payload={"report": "daily", "n": i},
            not_before=datetime.fromtimestamp(start + spread_s * i / n, UTC),
        )
        for i in range(n)
    ]
    before = (await client.info("memory"))["used_memory"]
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        for i in range(0, n, 1_000):
            await orch.submit_many(tasks[i : i + 1_000])
        submitted = time.time()
        after = (await client.info("memory"))["used_memory"]
        agent = NoopAgent(n)
        worker = Worker.from_client(agent, client=client, config=config, settings=settings)
        running = asyncio.create_task(worker.run())
        await worker.ready.wait()
        await asyncio.wait_for(agent.done.wait(), lead_s + spread_s + 600)
        worker.stop()
        await running
        late = []
        for task in tasks[::50]:
            info = await orch.lookup(task.task_id)
            assert info is not None and task.not_before is not None
            late.append(int(info["started_ms"]) - task.not_before.timestamp() * 1000)
    await client.aclose()
    late.sort()
    return {
        "tasks": n,
        "submit_s": round(submitted - (start - lead_s), 1),
        "submit_finished_before_first_due_s": round(start - submitted, 1),
        "bytes_per_scheduled_task": round((after - before) / n),
        "sampled": len(late),
        "early": sum(1 for x in late if x < 0),
        "late_p50_ms": round(statistics.median(late), 1),
        "late_p99_ms": round(late[int(0.99 * (len(late) - 1))], 1),
        "late_max_ms": round(late[-1], 1),
        "loadavg": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--lead", type=float, default=60.0, help="seconds to the first due")
    parser.add_argument("--spread", type=float, default=60.0, help="seconds they fall due over")
    args = parser.parse_args()
    with EmbeddedRedis() as server:
        print(asyncio.run(run(server.url, args.tasks, args.lead, args.spread)))


if __name__ == "__main__":
    main()
