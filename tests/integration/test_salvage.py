"""An entry that does not decode but still names its task (a producer on another schema
version, a damaged value): the worker dead-letters it and fails that task, so its
submitter hears why instead of waiting for ever. An entry naming a task it was not
enqueued for never touches that task."""

from __future__ import annotations

import orjson
from redis.asyncio import Redis

from deepagents.config import Settings, parse_config
from deepagents.contract import ErrorCode, ResultStatus, Task
from deepagents.contract.task import new_task_id
from deepagents.orchestrator import Orchestrator, TaskHandle
from deepagents.transport.base import Enqueue, StreamRef, now_ms
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams.bus import RedisStreamBus
from tests.support.replies import Fields, entries
from tests.support.workers import running_worker

CONFIG = """
defaults: {shards: 1, block_ms: 100}
agents: {echo: {class: "agents.echo:EchoAgent"}}
"""


async def test_an_undecodable_task_that_names_itself_fails_with_the_reason(
    client: Redis, prefix: str
) -> None:
    config = parse_config(CONFIG)
    settings = Settings(prefix=prefix, outbox=True)
    ref = StreamRef(Keys(prefix).shard("echo", 0), "p2")
    bus = RedisStreamBus(client)
    # A newer producer's task: a field this worker's schema does not know.
    skewed_id = new_task_id()
    skewed = {"task_id": skewed_id, "intent": "echo", "payload": {}, "speed_hint": 3}
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        victim = await orch.submit(Task(intent="echo", payload={"i": 1}))
        await bus.enqueue_many([Enqueue(ref, skewed_id, orjson.dumps(skewed))], max_backlog=1_000)
        # A bogus entry naming the victim, which it was not enqueued for.
        fields: Fields = {"task": orjson.dumps({"task_id": victim.task_id, "x": 1}), "attempt": 1,
                  "enq": now_ms(), "reply": ""}  # fmt: skip
        await client.xadd(ref.name, fields)
        handle = TaskHandle(skewed_id, "echo", "p2", 0, False, orch)
        async with running_worker(client, settings, config):
            failed = await handle.result(timeout=30)
            assert (await victim.result(timeout=30)).status is ResultStatus.SUCCESS
        assert failed.status is ResultStatus.FAILED
        assert failed.error is not None and failed.error.code == ErrorCode.DEAD_LETTERED
        assert "decode_error" in failed.error.message and "speed_hint" in failed.error.message
        assert await client.hget(ref.keys.task(skewed_id), "state") == b"dead"
        assert 0 < await client.ttl(ref.keys.task(skewed_id)) <= settings.result_ttl_s
    letters = await entries(client, ref.keys.dlq)
    assert sorted(f[b"reason"] for _, f in letters) == [b"decode_error", b"decode_error"]
    # The audit trail: the skewed task's ends dead-lettered; the victim's never says so,
    # and the bogus entry's event names no task.
    events = [
        e for _, f in await entries(client, ref.keys.outbox) for e in orjson.loads(f[b"events"])
    ]
    letters_by_task = {e["task_id"]: e for e in events if e["type"] == "dead_lettered"}
    assert set(letters_by_task) == {skewed_id, None}
    assert {e["type"] for e in events if e["task_id"] == victim.task_id} >= {"succeeded"}
    await bus.aclose()
