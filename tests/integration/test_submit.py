"""Submitting: routing, idempotency, admission control, and clear errors with nothing enqueued."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis

from agents.echo import EchoAgent
from agents.risk import RiskAgent
from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import FileConfig, Settings, load_config, parse_config
from deepagents.config.schema import AgentEntry
from deepagents.contract import Task
from deepagents.contract.task import utcnow
from deepagents.errors import (
    DeadlinePassed,
    IdempotencyConflict,
    InvalidPayload,
    Overloaded,
    PayloadTooLarge,
    TransportError,
    UnknownIntent,
)
from deepagents.orchestrator import Orchestrator, TaskHandle
from deepagents.transport.redis_streams import connect
from tests.support.wait import eventually
from tests.support.workers import running_worker

REPO = Path(__file__).resolve().parents[2]
ORDER = {"symbol": "IF", "side": "buy", "quantity": 2, "price": 3800, "available_funds": 1_000_000}


@pytest.fixture
def config() -> FileConfig:
    return load_config(REPO / "config" / "deepagents.yaml")


async def _keys(client: Redis, prefix: str) -> list[bytes]:
    return [k async for k in client.scan_iter(match=f"{prefix}:*")]


async def test_routing_intent_tier_shard(
    client: Redis, config: FileConfig, settings: Settings
) -> None:
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        urgent = await orch.submit({"intent": "trade", "payload": {**ORDER, "urgent": True}})
        normal = await orch.submit({"intent": "trade", "payload": ORDER})
        check = await orch.submit({"intent": "risk_check", "payload": ORDER})
        research = await orch.submit({"intent": "research", "payload": {"topic": "x"}})
        hinted = await orch.submit({"intent": "echo", "payload": {}, "priority": 0})
    assert (urgent.agent, urgent.tier) == ("risk", "p0")
    assert (normal.agent, normal.tier) == ("risk", "p1")
    assert (check.agent, check.tier) == ("risk", "p2")
    assert (research.agent, research.tier) == ("research", "p2")
    assert (hinted.agent, hinted.tier) == ("echo", "p0")
    assert 0 <= urgent.shard < 4 and 0 <= research.shard < 2
    stream = f"{settings.prefix}:{{risk:{urgent.shard}}}:p0"
    assert await client.xlen(stream) >= 1


@pytest.mark.parametrize(
    ("task", "error", "message"),
    [
        ({"intent": "nope", "payload": {}}, UnknownIntent, "no agent serves intent 'nope'"),
        (
            {"intent": "trade", "payload": {**ORDER, "quantity": -1}},
            InvalidPayload,
            "payload.quantity: Input should be greater than 0",
        ),
        (
            {"intent": "trade", "payload": {"symbol": "IF"}},
            InvalidPayload,
            "payload.side: Field required",
        ),
        ({"intent": "echo", "payload": "not an object"}, InvalidPayload, "invalid task: payload"),
        ({"intent": "echo", "payload": {}, "tenant": ""}, InvalidPayload, "invalid task: tenant"),
        ({"intent": "has space"}, InvalidPayload, "invalid task: intent"),
        (
            {"intent": "echo", "payload": {}, "deadline": "2020-01-01T00:00:00"},
            InvalidPayload,
            "timezone-aware",
        ),
        (
            {"intent": "echo", "payload": {}, "deadline": "2020-01-01T00:00:00Z"},
            DeadlinePassed,
            "is in the past",
        ),
        (
            {"intent": "echo", "payload": {"blob": "x" * 1_100_000}},
            PayloadTooLarge,
            "the limit is 1048576",
        ),
        ({"intent": "echo", "surprise": 1}, InvalidPayload, "Extra inputs are not permitted"),
    ],
)
async def test_bad_submissions_fail_clearly_and_enqueue_nothing(
    client: Redis,
    config: FileConfig,
    settings: Settings,
    prefix: str,
    task: dict[str, object],
    error: type[Exception],
    message: str,
) -> None:
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
            await orch.submit(task)
        # One bad task in a batch enqueues none of the batch.
        with pytest.raises(error):
            await orch.submit_many([{"intent": "echo", "payload": {}}, task])
    assert await _keys(client, prefix) == []


async def test_payload_limit_is_configurable(
    client: Redis, config: FileConfig, settings: Settings
) -> None:
    small = settings.model_copy(update={"max_payload_bytes": 2048})
    async with Orchestrator.from_client(client, config=config, settings=small) as orch:
        with pytest.raises(PayloadTooLarge, match="the limit is 2048"):
            await orch.submit({"intent": "echo", "payload": {"blob": "x" * 3000}})


async def test_idempotent_submit_returns_the_first_task(
    client: Redis, config: FileConfig, settings: Settings, prefix: str
) -> None:
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        spec = {
            "intent": "echo",
            "payload": {"a": 1},
            "idempotency_key": "order-42",
            "tenant": "acme",
        }
        handles = await asyncio.gather(*(orch.submit(spec) for _ in range(10)))
        other_tenant = await orch.submit({**spec, "tenant": "globex"})
    first = {h.task_id for h in handles}
    assert len(first) == 1
    assert sum(not h.duplicate for h in handles) == 1
    assert other_tenant.task_id not in first
    total = 0
    for shard in range(4):
        total += await client.xlen(f"{prefix}:{{echo:{shard}}}:p2")
    assert total == 2, "one stream entry per (tenant, key)"


async def test_idempotency_key_reused_for_a_different_task_is_refused(
    client: Redis, config: FileConfig, settings: Settings, prefix: str
) -> None:
    spec = {"intent": "echo", "payload": {"amount": 10}, "idempotency_key": "pay-7"}
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        first = await orch.submit(spec)
        # A retry may carry a fresh deadline: still the same task.
        later = (utcnow() + timedelta(minutes=5)).isoformat()
        retry = await orch.submit({**spec, "deadline": later})
        with pytest.raises(IdempotencyConflict, match="belongs to task") as info:
            await orch.submit({**spec, "payload": {"amount": 11}})
        with pytest.raises(IdempotencyConflict):
            await orch.submit_many(
                [Task(intent="echo", payload={"n": 1}), Task(**{**spec, "priority": 0})]
            )
    assert retry.task_id == first.task_id and retry.duplicate
    assert info.value.task_id == first.task_id
    total = 0
    for shard in range(4):
        for tier in ("p0", "p1", "p2"):
            total += await client.xlen(f"{prefix}:{{echo:{shard}}}:{tier}")
    assert total == 1, "a refused batch enqueues none of its tasks"


async def test_overloaded_stream_refuses_with_retry_after(
    client: Redis, settings: Settings, prefix: str
) -> None:
    config = parse_config(
        "defaults: {shards: 1, max_backlog: 5}\nagents: {echo: {class: 'agents.echo:EchoAgent'}}"
    )
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        await orch.submit_many([Task(intent="echo") for _ in range(5)])
        with pytest.raises(Overloaded, match="over its backlog limit") as info:
            await orch.submit(Task(intent="echo"))
    assert info.value.retry_after_s > 0
    assert await client.xlen(f"{prefix}:{{echo:0}}:p2") == 5


async def test_cancel_before_start(client: Redis, config: FileConfig, settings: Settings) -> None:
    async with Orchestrator.from_client(
        client, config=config, settings=settings, agents=[EchoAgent, RiskAgent]
    ) as orch:
        handle = await orch.submit(Task(intent="echo", deadline=utcnow() + timedelta(minutes=5)))
        assert await orch.cancel(handle.task_id) == "ok"
        result = await handle.result(timeout=5)
        assert result.error is not None and result.error.code == "cancelled"
        assert await orch.cancel(handle.task_id) == "done"
        assert await orch.cancel("unknown-id") == "missing"


async def test_backlog_limits_apply_per_agent_in_a_mixed_batch(
    client: Redis, settings: Settings, prefix: str
) -> None:
    config = parse_config(
        "defaults: {shards: 1}\n"
        "agents:\n"
        "  echo: {class: 'agents.echo:EchoAgent', settings: {max_backlog: 2}}\n"
        "  research: {class: 'agents.research:ResearchAgent', settings: {max_backlog: 100}}\n"
    )
    research = [{"intent": "research", "payload": {"topic": "t"}} for _ in range(5)]
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        handles = await orch.submit_many([*research, {"intent": "echo"}, {"intent": "echo"}])
        with pytest.raises(Overloaded) as info:
            await orch.submit_many([*research, {"intent": "echo"}])
    assert len(handles) == 7
    assert len(info.value.accepted) == 5  # type: ignore[attr-defined]
    assert await client.xlen(f"{prefix}:{{research:0}}:p2") == 10
    assert await client.xlen(f"{prefix}:{{echo:0}}:p2") == 2


async def test_a_submit_that_fails_has_enqueued_nothing(
    config: FileConfig, settings: Settings
) -> None:
    """The caller is told "not accepted" only about a task that will not run. Here the
    location record (a plain SET) is refused, as a full disk or an ACL would refuse it,
    while the enqueue script would pass: the submit fails and no stream holds the task."""
    with EmbeddedRedis() as server:
        admin = connect(server.url)
        await admin.acl_setuser(
            "noset",
            enabled=True,
            nopass=True,
            keys=["*"],
            channels=["*"],
            commands=["+@all", "-set"],
        )
        client = connect(server.url.replace("redis://", "redis://noset:x@"))
        try:
            async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
                with pytest.raises(TransportError, match="record task locations"):
                    await orch.submit({"intent": "echo", "payload": {}})
            streams = [s async for s in admin.scan_iter(_type="stream")]
            assert [await admin.xlen(s) for s in streams] == [0] * len(streams)
        finally:
            await client.aclose()
            await admin.aclose()


async def test_a_large_batch_counts_the_backlog_across_its_parts(
    client: Redis, settings: Settings, prefix: str
) -> None:
    """A batch larger than one script call (and than one of ``submit_many``'s parts)
    fills the stream up to its limit and refuses the rest, each task once: the backlog
    counted across calls, a task given twice enqueued once, and only the accepted tasks
    with a location record."""
    config = parse_config(
        "defaults: {shards: 1, max_backlog: 600}\nagents: {echo: {class: 'agents.echo:EchoAgent'}}"
    )
    tasks = [Task(intent="echo", payload={"i": i}) for i in range(700)]
    tasks.insert(400, tasks[10])  # the same task again, in another part
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        with pytest.raises(Overloaded) as info:
            await orch.submit_many(tasks)
    accepted = info.value.accepted  # type: ignore[attr-defined]
    assert len(accepted) == 601  # 600 tasks, one of them twice
    assert [h.task_id for h in accepted if h.duplicate] == [tasks[10].task_id]
    assert await client.xlen(f"{prefix}:{{echo:0}}:p2") == 600
    first_refused = tasks[601].task_id
    assert await client.exists(f"{prefix}:loc:{tasks[600].task_id}") == 1
    assert await client.exists(f"{prefix}:loc:{first_refused}") == 0
    assert await client.exists(f"{prefix}:{{echo:0}}:t:{first_refused}") == 0


async def test_a_large_batch_over_shards_keeps_each_streams_order(
    client: Redis, settings: Settings, prefix: str
) -> None:
    """A batch large enough to go as parts side by side (``orchestrator/parts.py``): each
    handle is its own task's, in the batch's order; each stream holds its tasks in the
    batch's order; a task given twice is enqueued once."""
    config = parse_config("defaults: {shards: 4}\nagents: {echo: {class: 'agents.echo:EchoAgent'}}")
    tasks = [Task(intent="echo", payload={"i": i}) for i in range(1000)]
    tasks.insert(900, tasks[3])
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        handles = await orch.submit_many(tasks)
    assert [h.task_id for h in handles] == [t.task_id for t in tasks]
    assert [i for i, h in enumerate(handles) if h.duplicate] == [900]
    for shard in range(4):
        key = f"{prefix}:{{echo:{shard}}}:p2"
        entries: list[tuple[bytes, dict[bytes, bytes]]] = await client.xrange(key)  # type: ignore[assignment]
        queued = [orjson.loads(fields[b"task"])["task_id"] for _, fields in entries]
        mine = [h.task_id for h in handles if h.shard == shard and not h.duplicate]
        assert queued == mine


async def test_a_large_batch_whose_first_part_fails_still_lands_the_others(
    client: Redis, settings: Settings, prefix: str
) -> None:
    """The first part's script fails (its stream's key holds a string: WRONGTYPE). The call
    raises that error, as one round trip would; the other part landed all the same, and a
    retry of the batch finds its tasks, by task id, and enqueues the rest once fixed."""
    config = parse_config("defaults: {shards: 2}\nagents: {echo: {class: 'agents.echo:EchoAgent'}}")
    tasks = [Task(intent="echo", payload={"i": i}) for i in range(600)]
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        shards = [orch.router.route(t).shard for t in tasks]
        first = shards[0]
        await client.set(f"{prefix}:{{echo:{first}}}:p2", "not a stream")
        with pytest.raises(TransportError, match="WRONGTYPE"):
            await orch.submit_many(tasks)
        assert await client.xlen(f"{prefix}:{{echo:{1 - first}}}:p2") == shards.count(1 - first)
        await client.delete(f"{prefix}:{{echo:{first}}}:p2")
        again = await orch.submit_many(tasks)
    assert [h.duplicate for h in again] == [s != first for s in shards]
    assert await client.xlen(f"{prefix}:{{echo:{first}}}:p2") == shards.count(first)


async def test_a_submit_no_live_worker_serves_carries_a_warning_and_logs_it_once(
    client: Redis, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    config = FileConfig(agents={"echo": AgentEntry(settings={"shards": 1})})
    said = "no live worker serves agent 'echo': its tasks wait until one starts"
    caplog.set_level(logging.WARNING, logger="deepagents.orchestrator")
    async with Orchestrator.from_client(
        client, config=config, settings=settings, agents=[EchoAgent]
    ) as orch:
        first = await orch.submit(Task(intent="echo", payload={}))
        (second,) = await orch.submit_many([Task(intent="echo", payload={})])
        assert first.warning == second.warning == said
        assert [r.getMessage() for r in caplog.records] == [f"{said} (accepted anyway)"]
        async with running_worker(client, settings, config):
            served = await eventually(
                lambda: _unwarned(orch), timeout=30, what="a submit without a warning"
            )
            assert served is not None and await served.result(timeout=30)


async def _unwarned(orch: Orchestrator) -> TaskHandle | None:
    handle = await orch.submit(Task(intent="echo", payload={}))
    return handle if handle.warning is None else None


async def test_a_reload_judges_the_workers_liveness_by_its_own_dead_after_ms(
    client: Redis, settings: Settings
) -> None:
    """A worker's last heartbeat is fresh under the first config's ``dead_after_ms`` (ten
    minutes) and stale under the reloaded one's (100 ms): the submits after the reload say
    that no live worker serves the agent."""
    patient = FileConfig(agents={"echo": AgentEntry(settings={"dead_after_ms": 600_000})})
    strict = FileConfig(
        agents={"echo": AgentEntry(settings={"dead_after_ms": 100, "liveness_ms": 50})}
    )
    async with Orchestrator.from_client(
        client, config=patient, settings=settings, agents=[EchoAgent]
    ) as orch:
        await orch.registry.register(EchoAgent(), "gone-quiet")
        assert (await orch.submit(Task(intent="echo", payload={}))).warning is None
        orch.reload(strict)
        warned = await eventually(
            lambda: _warned(orch), timeout=10, what="a submit with the no-live-worker warning"
        )
        assert warned is not None


async def _warned(orch: Orchestrator) -> TaskHandle | None:
    handle = await orch.submit(Task(intent="echo", payload={}))
    return handle if handle.warning is not None else None
