"""A recovered entry whose task hash holds a delivery count that is not a number: the
worker reads it as none so far (as the begin script does) and runs the task, instead of
its reader raising and the worker exiting on every start."""

from __future__ import annotations

from redis.asyncio import Redis

from deepagents.config import Settings, parse_config
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from deepagents.transport.keys import Keys
from tests.support.workers import running_worker

CONFIG = """
defaults: {shards: 1, block_ms: 100}
agents: {echo: {class: "agents.echo:EchoAgent"}}
"""


async def test_a_malformed_delivery_count_does_not_stop_the_worker(
    client: Redis, prefix: str
) -> None:
    config = parse_config(CONFIG)
    settings = Settings(prefix=prefix, consumer="restarted")
    keys = Keys(prefix).shard("echo", 0)
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        handle = await orch.submit(Task(intent="echo", payload={"n": 1}))
        stream = keys.stream(handle.tier)
        # A consumer of this name read it, then died: on start the worker reads it again
        # from its own pending entries, where delivery counts are checked.
        await client.xgroup_create(stream, "echo", id="0", mkstream=True)
        await client.xreadgroup("echo", "restarted", {stream: ">"}, count=10)
        await client.hset(keys.task(handle.task_id), "deliveries", "not a number")
        async with running_worker(client, settings, config) as worker:
            result = await handle.result(timeout=30)
            assert worker.stats.committed == 1
    assert result.status is ResultStatus.SUCCESS and result.output == {"n": 1}
