"""Dead consumers leave their groups (RELIABILITY.md row 10): one idle past
``consumer_idle_ms`` with nothing pending is removed; one still holding an entry never is
(``XGROUP DELCONSUMER`` would drop its pending entries)."""

from __future__ import annotations

from redis.asyncio import Redis

from deepagents.config import Settings, parse_config
from deepagents.transport.keys import Keys
from tests.support.wait import eventually
from tests.support.workers import running_worker

CONFIG = """
defaults:
  shards: 1
  block_ms: 100
  visibility_timeout_ms: 600000   # the held entry is never reclaimed during the test
  reclaim_interval_ms: 100        # a reclaim pass, then a prune, ten times a second
  consumer_idle_ms: 1000
agents: {echo: {class: "agents.echo:EchoAgent"}}
"""


async def test_idle_empty_consumers_go_and_those_holding_entries_stay(
    client: Redis, settings: Settings, prefix: str
) -> None:
    config = parse_config(CONFIG)
    stream = Keys(prefix).shard("echo", 0).stream("p2")
    async with running_worker(client, settings, config) as worker:
        await client.xgroup_createconsumer(stream, "echo", "gone")
        await client.xadd(stream, {"held": "by a consumer that stopped answering"})
        await client.xreadgroup("echo", "holding", {stream: ">"}, count=1)

        async def consumers() -> dict[str, int]:
            rows = await client.xinfo_consumers(stream, "echo")
            return {row["name"].decode(): int(row["pending"]) for row in rows}

        async def pruned() -> bool:
            return "gone" not in await consumers()

        await eventually(pruned, timeout=20, what="the idle consumer removed")
        left = await consumers()
        assert left.get("holding") == 1, f"a consumer with a pending entry stays: {left}"
        assert worker.consumer in left, "the worker never removes itself"
