"""The registry's record of what each worker reads, on a real Redis: live instances only,
removed on deregister, and a malformed record moved aside rather than trusted."""

from __future__ import annotations

import time

from redis.asyncio import Redis

from agents.echo import EchoAgent
from deepagents.config.placement import Placement
from deepagents.store.registry import AgentRegistry
from deepagents.telemetry.metrics import Metrics
from deepagents.transport.keys import Keys
from tests.support.replies import entries

EVERYTHING = Placement(("p0", "p1", "p2"), (0, 1))


async def test_live_reads_are_the_fresh_instances_records(client: Redis, prefix: str) -> None:
    keys = Keys(prefix)
    registry = AgentRegistry(client, keys, Metrics())
    agent = EchoAgent()
    for name, placement in (("a", Placement(("p0",), (0, 1))), ("b", Placement(("p1",), (1,)))):
        await registry.register(agent, name)
        await registry.record_reads("echo", name, placement)
    await registry.register(agent, "old")  # recorded nothing: reads everything
    await registry.register(agent, "stale")
    await registry.record_reads("echo", "stale", Placement(("p2",), (0,)))
    await client.hset(keys.agent_instances("echo"), "stale", int(time.time() * 1000) - 60_000)
    reads = await registry.live_reads("echo", stale_ms=30_000, everything=EVERYTHING)
    assert reads == {
        "a": Placement(("p0",), (0, 1)),
        "b": Placement(("p1",), (1,)),
        "old": EVERYTHING,
    }
    await registry.deregister(agent, "a")
    assert await client.hexists(keys.agent_reads("echo"), "a") == 0
    reads = await registry.live_reads("echo", stale_ms=30_000, everything=EVERYTHING)
    assert set(reads) == {"b", "old"}


async def test_a_malformed_reads_record_is_moved_aside_and_reads_nothing(
    client: Redis, prefix: str
) -> None:
    keys = Keys(prefix)
    metrics = Metrics()
    registry = AgentRegistry(client, keys, metrics)
    await registry.register(EchoAgent(), "w")
    await client.hset(keys.agent_reads("echo"), "w", b'{"tiers": "p0"}')
    reads = await registry.live_reads("echo", stale_ms=30_000, everything=EVERYTHING)
    assert reads == {"w": Placement((), ())}  # the gap shows rather than hides
    assert await client.hexists(keys.agent_reads("echo"), "w") == 0
    ((_, dead),) = await entries(client, keys.shard("echo", 0).dlq)
    assert dead[b"field"] == b"w" and dead[b"orig_value"] == b'{"tiers": "p0"}'
    labels = {"agent": "echo", "structure": "registry"}
    assert metrics.registry.get_sample_value("deepagents_decode_errors_total", labels) == 1
