"""A committed batch settles whole (``DeliveryHandler.committed``): nothing of it stays in
flight, in the quarantine or in its tier's count of active tasks. A leftover would make a
suspect wait out its drain for deliveries long done, and lower tiers yield for ever to a
tier that looks busy."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from deepagents.config import Settings, parse_config
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from tests.support.wait import eventually
from tests.support.workers import running_worker

CONFIG = """
defaults: {shards: 2, block_ms: 100}
agents: {echo: {class: "agents.echo:EchoAgent"}}
strategies:
  - {name: urgent, match: {payload.urgent: true}, tier: p0}
"""


async def test_committed_batches_leave_nothing_behind(client: Redis, prefix: str) -> None:
    config = parse_config(CONFIG)
    settings = Settings(prefix=prefix, outbox=True)
    tasks = [Task(intent="echo", payload={"i": i, "urgent": i % 5 == 0}) for i in range(300)]
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        handles = await orch.submit_many(tasks)
        async with running_worker(client, settings, config) as worker:
            results = await asyncio.gather(*(h.result(timeout=30) for h in handles))

            async def settled() -> bool:
                return worker.stats.committed == len(tasks) and not worker.inflight

            await eventually(settled, timeout=30, what="every commit's callback")
            assert not worker.settler.quarantine._running
            assert {name: pool.active for name, pool in worker.pools.items()} == {
                "p0": 0,
                "p1": 0,
                "p2": 0,
            }
    assert all(r.status is ResultStatus.SUCCESS for r in results)
    assert worker.stats.by_status == {"success": len(tasks)}
