"""How late a task with ``not_before`` starts: the start its worker records in the task
hash (``started_ms``, the begin script's clock) minus its ``not_before``.

Submits ``--tasks`` tasks spread over a second, each ``--ahead`` seconds ahead, to one
in-process ``Worker`` (EchoAgent, the default retry policy: the delayed pump turns every
100 ms), waits for every result and prints the lateness's p50, p99 and max in ms, and how
many started early (must be 0).

    .venv/bin/python loadtests/bench_run_later.py --url redis://127.0.0.1:6379/0
    .venv/bin/python loadtests/bench_run_later.py --cluster   # a one-node Cluster of its own

Each run uses its own key prefix and deletes its keys afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agents.echo import EchoAgent
from deepagents.config import Settings, parse_config
from deepagents.contract import Task
from deepagents.contract.task import utcnow
from deepagents.orchestrator import Orchestrator
from deepagents.transport.redis_streams import connect
from deepagents.worker import Worker

CONFIG = """
defaults: {shards: 2}
agents:
  echo: {class: "agents.echo:EchoAgent"}
"""


async def run(url: str, cluster: bool, n: int, ahead: float) -> dict[str, float]:
    config = parse_config(CONFIG)
    prefix = f"later{os.getpid()}"
    settings = Settings(redis_url=url, redis_cluster=cluster, prefix=prefix)
    client = connect(url, cluster=cluster)
    worker = Worker.from_client(EchoAgent(), client=client, config=config, settings=settings)
    running = asyncio.create_task(worker.run())
    await worker.ready.wait()
    try:
        async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
            tasks = [
                Task(intent="echo", not_before=utcnow() + timedelta(seconds=ahead + i / n))
                for i in range(n)
            ]
            handles = await orch.submit_many(tasks)
            await asyncio.gather(*(h.result(timeout=ahead + 60) for h in handles))
            late = []
            for task in tasks:
                info = await orch.lookup(task.task_id)
                assert info is not None and task.not_before is not None
                late.append(int(info["started_ms"]) - task.not_before.timestamp() * 1000)
    finally:
        worker.stop()
        await running
        async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            await client.delete(key)
        await client.aclose()
    late.sort()
    return {
        "tasks": n,
        "early": sum(1 for x in late if x < 0),
        "p50_ms": round(statistics.median(late), 1),
        "p99_ms": round(late[int(0.99 * (n - 1))], 1),
        "max_ms": round(late[-1], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a Redis (a Cluster node with --cluster)")
    parser.add_argument("--cluster", action="store_true")
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--ahead", type=float, default=2.0)
    args = parser.parse_args()
    if args.url:
        print(asyncio.run(run(args.url, args.cluster, args.tasks, args.ahead)))
        return
    if not args.cluster:
        parser.error("--url is required without --cluster")
    from tests.support.cluster import running_cluster  # the tests' one-node Cluster

    with running_cluster(1) as (server,):
        print(asyncio.run(run(server.url, True, args.tasks, args.ahead)))


if __name__ == "__main__":
    main()
