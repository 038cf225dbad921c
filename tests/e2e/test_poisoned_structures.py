"""A worker process started on poisoned structures (issue 16, finding 6): malformed members
of the delayed sets, the task streams and the registry hashes are moved to the dead-letter
stream with reason ``decode_error`` and counted; the worker keeps running and runs the good
tasks behind them."""

from __future__ import annotations

from typing import Any

import orjson
from prometheus_client import generate_latest
from redis.asyncio import Redis

from deepagents.contract import ErrorCode, ResultStatus, Task
from deepagents.contract.codec import encode_task
from deepagents.orchestrator import Orchestrator, TaskHandle
from deepagents.store.registry import AgentRegistry
from deepagents.telemetry import Metrics
from deepagents.transport.base import Enqueue, StreamRef
from deepagents.transport.keys import Keys, ShardKeys, shard_of
from deepagents.transport.redis_streams.bus import RedisStreamBus
from tests.e2e.conftest import registered
from tests.support.procs import Procs
from tests.support.wait import eventually
from tests.telemetry.support import free_port, samples, try_scrape

SHARDS = 2  # E2E_CONFIG's
# Not JSON, not an object, no task string, a bad attempt: each stopped the promote script.
BAD_MEMBERS = [b"not json", b"[1]", b'{"task": 5}', b'{"task": "{}", "attempt": "x"}']


def _task_on(shard: int, n: int) -> Task:
    """A task whose id falls on ``shard``."""
    while True:
        task = Task(intent="echo", payload={"retry": n})
        if shard_of(task.task_id, SHARDS) == shard:
            return task


async def _poison_shard(client: Redis, keys: ShardKeys, retry: Task) -> None:
    """The bad members first in the delayed set, a due retry behind them; and a stream
    entry that is not JSON."""
    member = {"tier": "p2", "task": encode_task(retry).decode(), "attempt": 2, "entry": "0-1"}
    await client.zadd(keys.delayed, {**dict.fromkeys(BAD_MEMBERS, 0), orjson.dumps(member): 1})
    await client.xadd(keys.stream("p2"), {"task": b"{not json", "attempt": 1, "enq": 0})


async def _decode_errors(port: int, structure: str) -> float:
    text = try_scrape(port)
    found = samples(text).get("deepagents_decode_errors_total", []) if text else []
    return sum(v for labels, v in found if labels == {"agent": "echo", "structure": structure})


async def _letters(client: Redis, dlq: str) -> list[dict[bytes, bytes]]:
    entries: list[tuple[bytes, dict[bytes, bytes]]] = await client.xrange(dlq)  # type: ignore[assignment]
    return [fields for _, fields in entries]


async def test_a_worker_on_poisoned_structures_moves_them_aside_and_runs_the_good_tasks(
    client: Redis, orch: Orchestrator, procs: Procs, prefix: str
) -> None:
    keys = Keys(prefix)
    shards = [keys.shard("echo", s) for s in range(SHARDS)]
    retries = [_task_on(s, s) for s in range(SHARDS)]
    for shard_keys, retry in zip(shards, retries, strict=True):
        await _poison_shard(client, shard_keys, retry)
    good = await orch.submit_many([Task(intent="echo", payload={"i": i}) for i in range(10)])
    # A heartbeat that is not a timestamp: a worker's registration does not rewrite it. Set
    # after the submit, whose check for a live worker reads the heartbeats too (and would
    # move it aside, counted in this orchestrator's metrics, before the worker meets it).
    await client.hset(keys.agent_instances("echo"), "bogus", "not a number")
    port = free_port()
    worker = procs.worker("agents.echo:EchoAgent", "--metrics-port", str(port))

    async def delayed_sets_empty() -> bool:
        assert worker.poll() is None, f"the worker exited: {procs.output(worker)}"
        return all([await client.zcard(k.delayed) == 0 for k in shards])

    await eventually(delayed_sets_empty, timeout=60, what="the delayed sets emptied")
    retried = [TaskHandle(t.task_id, "echo", "p2", s, False, orch) for s, t in enumerate(retries)]
    for handle in [*good, *retried]:
        result = await handle.result(timeout=60)
        assert result.status is ResultStatus.SUCCESS, procs.output(worker)
    for shard_keys in shards:
        letters = await _letters(client, shard_keys.dlq)
        delayed = [f for f in letters if f[b"source"] == shard_keys.delayed.encode()]
        assert sorted(f[b"orig_member"] for f in delayed) == sorted(BAD_MEMBERS)
        assert {f[b"reason"] for f in delayed} == {b"decode_error"}
        assert any(f[b"source"] == shard_keys.stream("p2").encode() for f in letters)
    await eventually(lambda: _decode_errors(port, "delayed"), what="delayed decode errors counted")
    assert await _decode_errors(port, "delayed") == len(BAD_MEMBERS) * SHARDS
    assert await _decode_errors(port, "stream") == SHARDS

    # The registry, as the gateway's GET /v1/agents and routing read it, poisoned while
    # the worker runs: the bad fields are moved aside, counted, and read as absent.
    await registered(client, prefix, "echo", 1)
    await client.hset(keys.agent("echo"), "intents", b"not json")
    metrics = Metrics()
    registry = AgentRegistry(client, keys, metrics)
    echo = (await registry.agents())["echo"]
    assert echo["intents"] == []
    assert isinstance(echo["instances"], dict) and "bogus" not in echo["instances"]
    assert len(echo["instances"]) == 1  # the worker's own
    assert (await orch.agent_health())["echo"].instances == 1
    assert await client.hget(keys.agent("echo"), "intents") is None
    assert not await client.hexists(keys.agent_instances("echo"), "bogus")
    moved = {
        (f[b"field"], f[b"orig_value"])
        for f in await _letters(client, shards[0].dlq)
        if f[b"source"].startswith(keys.agent("echo").encode())
    }
    assert moved == {(b"intents", b"not json"), (b"bogus", b"not a number")}
    counted = samples(generate_latest(metrics.registry).decode())["deepagents_decode_errors_total"]
    assert [labels for labels, _ in counted] == [{"agent": "echo", "structure": "registry"}]
    ours = counted[0][1]
    # The worker's liveness watch reads the heartbeats too, and moves "bogus" aside itself
    # when it meets it first: each malformed field is counted by a reader that met it.
    assert ours >= 1  # "intents", which only this reader reads
    assert ours + await _decode_errors(port, "registry") >= 2

    after = await orch.submit(Task(intent="echo", payload={"after": True}))
    assert (await after.result(timeout=60)).status is ResultStatus.SUCCESS
    assert worker.poll() is None, procs.output(worker)


async def test_a_dead_lettered_entry_is_logged_without_its_values(
    client: Redis, procs: Procs, prefix: str
) -> None:
    """Issue 16, finding 7: where validation failed and how, never the input (pydantic's
    own text quotes it: ``input_value={... 'password': ...}``)."""
    keys = Keys(prefix).shard("echo", 0)
    # The payload must be an object: pydantic's text would quote this list.
    task = {"intent": "echo", "payload": [{"password": "hunter2-secret"}]}
    await client.xadd(keys.stream("p2"), {"task": orjson.dumps(task), "attempt": 1, "enq": 0})
    worker = procs.worker("agents.echo:EchoAgent")

    async def dead_lettered() -> list[dict[bytes, bytes]]:
        return await _letters(client, keys.dlq)

    (letter,) = await eventually(dead_lettered, what="the entry dead-lettered")
    await eventually(
        lambda: _logged(procs.output(worker), "dead-lettered entry"), what="the warning"
    )
    assert "hunter2" not in procs.output(worker)
    assert letter[b"error"] == b"ValidationError: payload: dict_type"


async def _logged(output: str, text: str) -> bool:
    return text in output


async def _enqueue_raw(
    client: Redis, orch: Orchestrator, task: Task, task_json: bytes
) -> TaskHandle:
    """``task`` enqueued as ``submit`` would (task hash, this orchestrator's reply channel),
    but with ``task_json`` in the stream: what a damaged write or another producer left."""
    shard = shard_of(task.task_id, SHARDS)
    ref = StreamRef(Keys(orch.settings.prefix).shard("echo", shard), "p2")
    bus = RedisStreamBus(client)
    try:
        item = Enqueue(ref, task.task_id, task_json, orch.reply_channel)
        [(status, _)] = await bus.enqueue_many([item], max_backlog=1_000)
        assert status == "ok"
    finally:
        await bus.aclose()
    return TaskHandle(task.task_id, "echo", "p2", shard, False, orch)


async def test_a_damaged_task_tells_its_submitter_at_once(
    client: Redis, orch: Orchestrator, procs: Procs
) -> None:
    """Issue 24, item 8: its JSON no longer parses, so its id cannot be read the usual way;
    the submitter is told ``dead``, with the reason, when it is dead-lettered (on main it
    waited out its whole timeout)."""
    task = Task(intent="echo", payload={"n": 1})
    handle = await _enqueue_raw(client, orch, task, encode_task(task)[:-7])  # cut short
    replies = client.pubsub()
    await replies.subscribe(orch.reply_channel)
    procs.worker("agents.echo:EchoAgent")

    async def published() -> dict[str, Any] | None:
        message = await replies.get_message(ignore_subscribe_messages=True, timeout=0.1)
        return orjson.loads(message["data"]) if message else None

    try:
        notified = await eventually(published, what="the reply published")
    finally:
        await replies.aclose()
    assert notified is not None and notified["task_id"] == task.task_id
    assert notified["status"] == "failed"
    result = await handle.result(timeout=30)
    assert result.error is not None and result.error.code == ErrorCode.DEAD_LETTERED
    assert result.error.message.startswith("decode_error: JSONDecodeError")
    task_key = Keys(orch.settings.prefix).shard("echo", handle.shard).task(task.task_id)
    assert await client.hget(task_key, "state") == b"dead"


async def test_a_task_over_the_size_limit_is_dead_lettered_unread(
    client: Redis, orch: Orchestrator, procs: Procs
) -> None:
    """Issue 16, finding 9: written straight to the stream, past what ``submit`` admits
    (DEEPAGENTS_MAX_PAYLOAD_BYTES, 1 MiB by default), it was run like any other."""
    big = Task(intent="echo", payload={"blob": "x" * 2_000_000})
    handle = await _enqueue_raw(client, orch, big, encode_task(big))
    worker = procs.worker("agents.echo:EchoAgent")
    result = await handle.result(timeout=60)
    assert result.status is ResultStatus.FAILED and result.error is not None
    assert result.error.message.startswith("too_large: the task is 2000"), result.error.message
    assert "over the limit of 1048576" in result.error.message
    after = await orch.submit(Task(intent="echo", payload={"after": True}))
    assert (await after.result(timeout=60)).status is ResultStatus.SUCCESS
    assert worker.poll() is None, procs.output(worker)
