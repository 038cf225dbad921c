"""Concurrent ``Orchestrator.submit`` calls share an enqueue, each with its own outcome."""

from __future__ import annotations

import asyncio
from pathlib import Path

from redis.asyncio import Redis

from deepagents.config import Settings, load_config, parse_config
from deepagents.contract import Task
from deepagents.errors import InvalidPayload, NotReplicated, Overloaded
from deepagents.orchestrator import Orchestrator

REPO = Path(__file__).resolve().parents[2]
ORDER = {"symbol": "IF", "side": "buy", "quantity": 2, "price": 3800, "available_funds": 1_000_000}


async def test_concurrent_submits_each_get_their_own_handle(
    client: Redis, settings: Settings
) -> None:
    config = load_config(REPO / "config" / "deepagents.yaml")
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        tasks = [Task(intent="echo", payload={"i": i}) for i in range(20)]
        tasks += [Task(intent="trade", payload=ORDER) for _ in range(5)]
        handles = await asyncio.gather(*(orch.submit(t) for t in tasks))
        assert [h.task_id for h in handles] == [t.task_id for t in tasks]
        assert {h.agent for h in handles[:20]} == {"echo"} and handles[-1].agent == "risk"
        assert not any(h.duplicate for h in handles)
        for task in tasks:
            info = await client.hgetall(orch.keys.shard(*_where(orch, task)).task(task.task_id))
            assert info[b"state"] == b"queued"


async def test_an_invalid_task_is_refused_alone(client: Redis, settings: Settings) -> None:
    config = load_config(REPO / "config" / "deepagents.yaml")
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        good = [Task(intent="trade", payload=ORDER) for _ in range(4)]
        bad = Task(intent="trade", payload={**ORDER, "quantity": -1})
        results = await asyncio.gather(
            *(orch.submit(t) for t in [good[0], good[1], bad, good[2], good[3]]),
            return_exceptions=True,
        )
    assert isinstance(results[2], InvalidPayload)
    assert [getattr(r, "task_id", None) for r in results[:2] + results[3:]] == [
        t.task_id for t in good
    ]


async def test_a_backlog_refusal_names_one_task_per_caller(
    client: Redis, settings: Settings, prefix: str
) -> None:
    config = parse_config(
        "defaults: {shards: 1, max_backlog: 5}\nagents: {echo: {class: 'agents.echo:EchoAgent'}}"
    )
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        tasks = [Task(intent="echo") for _ in range(8)]
        results = await asyncio.gather(*(orch.submit(t) for t in tasks), return_exceptions=True)
    refused = [r for r in results if isinstance(r, Overloaded)]
    assert len(refused) == 3 and all("1 task(s) refused" in str(r) for r in refused)
    assert all(getattr(r, "accepted", None) == [] for r in refused)
    assert await client.xlen(f"{prefix}:{{echo:0}}:p2") == 5


def _where(orch: Orchestrator, task: Task) -> tuple[str, int]:
    route = orch.router.route(task)
    return route.agent, route.shard


async def test_a_replication_refusal_names_only_each_callers_task(
    client: Redis, settings: Settings
) -> None:
    """Coalesced callers may be different tenants: each hears of its own task alone."""
    config = load_config(REPO / "config" / "deepagents.yaml")
    waiting = settings.model_copy(update={"min_replicas": 1, "replica_wait_ms": 50})
    async with Orchestrator.from_client(client, config=config, settings=waiting) as orch:
        # the shared Redis has no replica
        tasks = [Task(intent="echo", payload={"i": i}) for i in range(10)]
        results = await asyncio.gather(*(orch.submit(t) for t in tasks), return_exceptions=True)
    assert all(isinstance(r, NotReplicated) for r in results), results
    for task, refused in zip(tasks, results, strict=True):
        assert isinstance(refused, NotReplicated)
        assert refused.task_ids == [task.task_id]
        others = [t.task_id for t in tasks if t is not task]
        assert task.task_id in str(refused) and not any(o in str(refused) for o in others)


async def test_a_replication_refusal_tells_backlog_refusals_apart(
    client: Redis, settings: Settings
) -> None:
    config = parse_config(
        "defaults: {shards: 1, max_backlog: 5}\nagents: {echo: {class: 'agents.echo:EchoAgent'}}"
    )
    waiting = settings.model_copy(update={"min_replicas": 1, "replica_wait_ms": 50})
    async with Orchestrator.from_client(client, config=config, settings=waiting) as orch:
        tasks = [Task(intent="echo", payload={"i": i}) for i in range(10)]
        results = await asyncio.gather(*(orch.submit(t) for t in tasks), return_exceptions=True)
    written = [r for r in results if isinstance(r, NotReplicated)]
    refused = [r for r in results if isinstance(r, Overloaded)]
    assert len(written) == 5 and len(refused) == 5, results  # the stream holds 5
    assert all(len(r.task_ids) == 1 for r in written)
