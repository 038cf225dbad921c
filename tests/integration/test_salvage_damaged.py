"""A task whose JSON was damaged in the stream still names its task in its text: the worker
fails that task with the reason, so its submitter hears it (issue 24, item 8; the e2e test
``test_a_damaged_task_tells_its_submitter_at_once``), but only a task enqueued with that
very entry: a damaged entry naming another task leaves it alone."""

from __future__ import annotations

from redis.asyncio import Redis

from deepagents.config import Settings, parse_config
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from deepagents.transport.base import StreamRef, now_ms
from deepagents.transport.keys import Keys
from tests.support.wait import eventually
from tests.support.workers import running_worker

CONFIG = """
defaults: {shards: 1, block_ms: 100}
agents: {echo: {class: "agents.echo:EchoAgent"}}
"""


async def test_a_damaged_entry_naming_another_task_never_ends_it(
    client: Redis, prefix: str
) -> None:
    config = parse_config(CONFIG)
    settings = Settings(prefix=prefix)
    ref = StreamRef(Keys(prefix).shard("echo", 0), "p2")
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        victim = await orch.submit(Task(intent="echo", payload={"i": 1}))
        async with running_worker(client, settings, config):
            assert (await victim.result(timeout=30)).status is ResultStatus.SUCCESS
            damaged = b'{"task_id": "%s", "intent": "ec' % victim.task_id.encode()
            fields = {"task": damaged, "attempt": 1, "enq": now_ms(), "reply": ""}
            await client.xadd(ref.name, fields)  # type: ignore[arg-type]

            async def dead_lettered() -> int:
                return int(await client.xlen(ref.keys.dlq))

            await eventually(dead_lettered, what="the damaged entry dead-lettered")
    assert await client.hget(ref.keys.task(victim.task_id), "state") == b"done"
    stored = await orch.get_result(victim.task_id)
    assert stored is not None and stored.status is ResultStatus.SUCCESS
