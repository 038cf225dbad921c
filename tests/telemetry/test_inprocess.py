"""In-process worker and orchestrator against the real Redis: bounded cardinality and the
health schedule (registry, metrics, orchestrator view)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from prometheus_client import generate_latest
from redis.asyncio import Redis

from agents.echo import EchoAgent
from deepagents import AgentContract, Task
from deepagents.config import FileConfig, Settings, parse_config
from deepagents.orchestrator import Orchestrator
from deepagents.telemetry import Metrics, Telemetry, Tracing
from deepagents.worker import Worker
from tests.support.wait import eventually
from tests.telemetry.agents import MoodyAgent
from tests.telemetry.support import samples

CONFIG = """
defaults: {shards: 2, max_backlog: 1000000, batch_size: 100, visibility_timeout_ms: 1000}
agents:
  echo: {class: "agents.echo:EchoAgent"}
  moody: {class: "tests.telemetry.agents:MoodyAgent"}
strategies:
  - {name: urgent, match: {payload.urgent: true}, tier: p0}
"""


@pytest.fixture
def config() -> FileConfig:
    return parse_config(CONFIG)


@pytest.fixture
def telemetry() -> Telemetry:
    return Telemetry(metrics=Metrics(), tracing=Tracing(None))


async def _running(
    agent: AgentContract, client: Redis, config: FileConfig, settings: Settings, tm: Telemetry
) -> tuple[Worker, asyncio.Task[None]]:
    worker = Worker.from_client(
        agent, client=client, config=config, settings=settings, telemetry=tm
    )
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(worker.ready.wait(), 10)
    return worker, task


@pytest.fixture
async def stop_workers() -> AsyncIterator[list[tuple[Worker, asyncio.Task[None]]]]:
    started: list[tuple[Worker, asyncio.Task[None]]] = []
    yield started
    for worker, task in started:
        worker.stop()
        await asyncio.wait_for(task, 30)


def series(tm: Telemetry) -> int:
    assert tm.metrics is not None
    return sum(len(v) for v in samples(generate_latest(tm.metrics.registry).decode()).values())


async def _submit(orch: Orchestrator, n: int) -> list[str]:
    ids: list[str] = []
    for start in range(0, n, 500):
        tasks = [
            Task(
                intent="echo",
                payload={"i": i, "urgent": i % 10 == 0},
                tenant=f"tenant-{uuid.uuid4().hex}",
            )
            for i in range(start, min(n, start + 500))
        ]
        ids += [h.task_id for h in await orch.submit_many(tasks)]
    return ids


async def test_series_do_not_grow_with_traffic(
    client: Redis,
    config: FileConfig,
    settings: Settings,
    telemetry: Telemetry,
    stop_workers: list[tuple[Worker, asyncio.Task[None]]],
) -> None:
    settings = settings.model_copy(update={"outbox": False})
    stop_workers.append(await _running(EchoAgent(), client, config, settings, telemetry))
    worker = stop_workers[0][0]
    async with Orchestrator.from_client(
        client, config=config, settings=settings, telemetry=telemetry
    ) as orch:
        await _submit(orch, 100)
        await eventually(lambda: _committed(worker, 100), timeout=60, what="100 tasks")
        after_100 = series(telemetry)
        await _submit(orch, 9_900)
        await eventually(lambda: _committed(worker, 10_000), timeout=120, what="10,000 tasks")
    assert series(telemetry) == after_100
    got = samples(generate_latest(telemetry.metrics.registry).decode())  # type: ignore[union-attr]
    done = sum(v for lab, v in got["deepagents_tasks_completed_total"] if lab["agent"] == "echo")
    assert done == 10_000
    # Each committed task is observed once in each latency histogram, in its own tier.
    by_tier: dict[str, float] = {}
    for lab, v in got["deepagents_tasks_completed_total"]:
        if lab["agent"] == "echo" and v:
            by_tier[lab["tier"]] = by_tier.get(lab["tier"], 0) + v
    assert set(by_tier) == {"p0", "p2"}
    for name in ("latency", "queue_wait", "execution"):
        rows = got[f"deepagents_task_{name}_seconds_count"]
        observed = {lab["tier"]: v for lab, v in rows if lab["agent"] == "echo" and v}
        assert observed == by_tier, name
    submitted = sum(v for _, v in got["deepagents_tasks_submitted_total"])
    assert submitted == 10_000
    assert not any("tenant" in lab for rows in got.values() for lab, _ in rows)


async def _committed(worker: Worker, n: int) -> bool:
    return worker.stats.committed >= n


async def test_health_is_checked_on_schedule_and_visible_to_the_orchestrator(
    client: Redis,
    config: FileConfig,
    settings: Settings,
    telemetry: Telemetry,
    stop_workers: list[tuple[Worker, asyncio.Task[None]]],
) -> None:
    settings = settings.model_copy(update={"health_interval_s": 0.1})
    agent = MoodyAgent()
    stop_workers.append(await _running(agent, client, config, settings, telemetry))
    orch = Orchestrator.from_client(client, config=config, settings=settings, telemetry=telemetry)

    async def healthy() -> set[str]:
        return await orch.healthy_agents()

    assert await eventually(healthy) == {"moody"}  # echo: configured, no instance
    agent.healthy = False
    await eventually(lambda: _not(healthy), what="moody unhealthy")
    health = (await orch.agent_health())["moody"]
    assert (health.instances, health.fresh, health.healthy, health.ratio) == (1, 1, 0, 0.0)
    agent.healthy = True
    await eventually(healthy, what="moody healthy again")
    agent.raise_health = True  # a crashing check is unhealthy too
    await eventually(lambda: _not(healthy), what="moody unhealthy (check raised)")
    agent.raise_health = False
    await eventually(healthy, what="moody healthy again")
    got = samples(generate_latest(telemetry.metrics.registry).decode())  # type: ignore[union-attr]
    total = got["deepagents_agent_health_checks_total"][0][1]
    passed = got["deepagents_agent_health_checks_healthy_total"][0][1]
    assert total >= 3 and 1 <= passed < total
    assert got["deepagents_agent_healthy"] == [({"agent": "moody"}, 1.0)]


async def _not(check) -> bool:  # type: ignore[no-untyped-def]
    return not await check()
