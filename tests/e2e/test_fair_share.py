"""Fair share inside a tier: one tenant's backlog does not make the others wait behind it,
and weights share the tier in proportion. One in-process worker, a no-op agent, real Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from deepagents.config import FileConfig, Settings, load_config
from deepagents.contract import Task
from deepagents.orchestrator import Orchestrator
from tests.agents import StartsAgent
from tests.support.wait import eventually
from tests.support.workers import running_worker

FAIR_CONFIG = """
tiers:
  p0: {concurrency: 10}
  p2: {concurrency: 20, fair_share: true}
default_tier: p2
defaults: {shards: 1, block_ms: 200}
agents:
  starts: {class: "tests.agents:StartsAgent"}
strategies:
  - {name: urgent, match: {payload.urgent: true}, tier: p0}
"""


@pytest.fixture
def fair_config(tmp_path: Path) -> FileConfig:
    path = tmp_path / "deepagents.yaml"
    path.write_text(FAIR_CONFIG)
    return load_config(path)


@pytest.fixture
async def fair_orch(
    client: Redis, settings: Settings, fair_config: FileConfig
) -> AsyncIterator[Orchestrator]:
    async with Orchestrator.from_client(client, config=fair_config, settings=settings) as orch:
        yield orch


async def _queue(orch: Orchestrator, tasks: list[Task]) -> None:
    for i in range(0, len(tasks), 1_000):  # pipelined: one round trip per thousand
        await orch.submit_many(tasks[i : i + 1_000])


async def test_nine_small_tenants_start_before_a_big_backlog_is_a_tenth_done(
    client: Redis, settings: Settings, fair_config: FileConfig, fair_orch: Orchestrator
) -> None:
    await _queue(fair_orch, [Task(intent="start", tenant="A") for _ in range(10_000)])
    small = [Task(intent="start", tenant=t) for t in "BCDEFGHIJ" for _ in range(10)]
    await _queue(fair_orch, small)
    agent = StartsAgent()
    async with running_worker(client, settings, fair_config, agent):

        async def small_ones_started() -> bool:
            return sum(key != "A" for key in agent.started) == len(small)

        await eventually(small_ones_started, timeout=120, what="every B-J task started")
        last = max(i for i, key in enumerate(agent.started) if key != "A")
    big_before = agent.started[:last].count("A")
    print(f"\nA started before the last of B-J: {big_before} of 10,000")
    assert big_before < 1_000


async def test_weights_share_the_tier_in_proportion(
    client: Redis, settings: Settings, fair_config: FileConfig, fair_orch: Orchestrator
) -> None:
    heavy = [Task(intent="start", fairness_key="heavy", fairness_weight=3) for _ in range(1_500)]
    light = [Task(intent="start", fairness_key="light") for _ in range(500)]
    await _queue(fair_orch, heavy + light)
    agent = StartsAgent()
    async with running_worker(client, settings, fair_config, agent):

        async def enough() -> bool:
            return len(agent.started) >= 1_200

        await eventually(enough, timeout=120, what="1,200 tasks started")
    window = agent.started[:1_200]  # both keys still queued throughout
    ratio = window.count("heavy") / window.count("light")
    print(f"\nheavy:light started {ratio:.3f} (3 wanted)")
    assert abs(ratio - 3) <= 0.15


async def test_an_urgent_task_still_overtakes_a_fair_tier_s_backlog(
    client: Redis, settings: Settings, fair_config: FileConfig, fair_orch: Orchestrator
) -> None:
    """Tiers keep their strict order with fair share on inside p2: queued after 5,000 p2
    tasks of two tenants, the p0 task starts while most of them still wait."""
    await _queue(fair_orch, [Task(intent="start", tenant=t) for t in "AB" for _ in range(2_500)])
    urgent = await fair_orch.submit(Task(intent="start", tenant="U", payload={"urgent": True}))
    assert urgent.tier == "p0"
    agent = StartsAgent()
    async with running_worker(client, settings, fair_config, agent):
        await urgent.result(timeout=60)
        position = agent.started.index("U")
    assert position < 2_500, f"the urgent task started after {position} of 5,000 p2 tasks"
