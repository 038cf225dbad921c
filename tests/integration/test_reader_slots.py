"""A tier's slots go to the shard with work: the readers of idle shards, blocked on their
streams, hold one slot each, not their share of the tier, so a busy shard's tasks run on the
rest at once instead of after the idle readers' blocking reads end (``block_ms``)."""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis

from deepagents import AgentContract, Result
from deepagents.config import Settings, parse_config
from deepagents.contract import Task
from deepagents.orchestrator import Orchestrator
from deepagents.transport.base import StreamRef
from deepagents.transport.keys import Keys, shard_of
from deepagents.transport.redis_streams import RedisStreamBus
from deepagents.worker.pools import TierPool
from tests.support.wait import eventually
from tests.support.workers import running_worker

SHARDS, SLOTS = 4, 8
# The idle readers hold their slots through a block; the test's state comes well before
# the first one ends, and a worker's stop waits for them to end.
BLOCK_MS = 2_000
CONFIG = parse_config(
    f"""
tiers:
  p0: {{concurrency: {SLOTS}, max_wait_ms: 60000}}
default_tier: p0
agents:
  hold: {{class: "tests.integration.test_reader_slots:HoldAgent",
          settings: {{shards: {SHARDS}, block_ms: {BLOCK_MS}}}}}
"""
)


class HoldAgent(AgentContract):
    """Runs until the test lets its tasks go; counts the tasks running."""

    name = "hold"
    version = "1.0.0"
    intents = ("hold",)

    def __init__(self) -> None:
        self.running = 0
        self.go = asyncio.Event()

    async def execute(self, context: dict[str, Any]) -> Result:
        self.running += 1
        try:
            await self.go.wait()
        finally:
            self.running -= 1
        return Result(output={})


def _on_shard_0(n: int) -> list[Task]:
    tasks: list[Task] = []
    while len(tasks) < n:
        task = Task(intent="hold", payload={})
        if shard_of(task.task_id, SHARDS) == 0:
            tasks.append(task)
    return tasks


async def test_a_busy_shard_runs_on_the_slots_the_idle_shards_readers_do_not_need(
    client: Redis, prefix: str
) -> None:
    settings = Settings(prefix=prefix)
    agent = HoldAgent()
    async with (
        Orchestrator.from_client(client, config=CONFIG, settings=settings) as orch,
        running_worker(client, settings, CONFIG, agent) as worker,
    ):
        # Every reader holding slots for its read of its empty stream first, as in a worker
        # that has been idle.
        pool = worker.pools["p0"]
        await eventually(lambda: _held(pool, SHARDS), timeout=20, what="every reader's slots")
        handles = await orch.submit_many(_on_shard_0(SLOTS))
        # Shard 0's reader runs out of slots: what runs then is what the idle readers left.
        # They hold a slot each, so shard 0 runs the other five; each holding its share (2),
        # they left it 2.
        running = await eventually(
            lambda: _running_when_saturated(agent, pool), timeout=30, what="no slot free"
        )
        assert running == SLOTS - (SHARDS - 1)
        agent.go.set()
        for handle in handles:
            await handle.result(timeout=30)


async def _running_when_saturated(agent: HoldAgent, pool: TierPool) -> int | None:
    """The tasks running once every slot is taken and a reader waits for one (shard 0's:
    the idle readers are blocked on their streams)."""
    if pool.free == 0 and pool.waiting and agent.running:
        return agent.running
    return None


async def _held(pool: TierPool, n: int) -> bool:
    return pool.in_use >= n


async def test_a_read_blocking_longer_than_its_socket_timeout_ends_empty_not_in_an_error(
    client: Redis, redis_url: str, prefix: str
) -> None:
    """A worker configured with ``block_ms`` over its client's socket timeout: the read is
    cut to end before the timeout, with the server's empty answer, rather than in the
    client's timeout (a closed connection and a transport error per idle read)."""
    impatient = Redis.from_url(redis_url, socket_timeout=1.0)
    bus = RedisStreamBus(impatient)
    try:
        ref = StreamRef(Keys(prefix).shard("hold", 0), "p0")
        await bus.ensure_group(ref, "hold")
        assert await bus.read(ref, "hold", "c1", 10, 60_000) == []
    finally:
        await bus.aclose()
        await impatient.aclose()
