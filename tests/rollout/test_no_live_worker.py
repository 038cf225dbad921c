"""A version with no live worker gets no new tasks: with only stable's worker running, the
canary's share goes to stable (counted as rerouted), and the controller exports the
canary's live workers as 0, which the alert rule ``DeepagentsRolloutVersionNoWorkers``
fires on."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from deepagents.compose import services_for
from deepagents.config import Settings
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from deepagents.orchestrator.rollout_controller import RolloutController
from deepagents.orchestrator.rollout_ops import RolloutOps
from deepagents.store.lease import RedisLease
from deepagents.store.rollouts import RedisRollouts
from deepagents.telemetry.core import Telemetry
from deepagents.telemetry.metrics import FleetMetrics
from deepagents.transport.keys import Keys
from deepagents.worker import Worker
from tests.rollout.agents import NAME, StableAgent
from tests.rollout.conftest import rollout_config, stream_lengths
from tests.support.wait import eventually
from tests.support.workers import running


async def test_a_canary_with_no_live_worker_gets_no_tasks(
    client: Redis, settings: Settings, prefix: str
) -> None:
    config = rollout_config(weight=0.5)
    worker = Worker.from_client(
        StableAgent(client, prefix), client=client, config=config, settings=settings
    )
    telemetry = Telemetry()
    async with running(worker):
        async with Orchestrator.from_client(
            client, config=config, settings=settings, agents=[StableAgent], telemetry=telemetry
        ) as orch:
            handles = await orch.submit_many(
                [Task(intent="canaried", payload={"n": i}) for i in range(300)]
            )
            results = await asyncio.gather(*(h.result(timeout=60) for h in handles))
        fleet = FleetMetrics()
        ops = RolloutOps(services_for(client, settings), config, "test")
        lease = RedisLease(client, f"{prefix}:rollout:lease", "test", 5_000)
        await RolloutController(ops, lease, metrics=fleet.rollout).tick()
    assert {r.agent_version for r in results} == {"1.2.0"}
    assert all(r.status in (ResultStatus.SUCCESS, ResultStatus.FAILED) for r in results)
    assert (await stream_lengths(client, prefix, config))["1.3.0"] == 0
    assert telemetry.metrics is not None
    rerouted = telemetry.metrics.registry.get_sample_value(
        "deepagents_rollout_rerouted_total", {"agent": NAME, "version": "1.3.0"}
    )
    assert rerouted is not None and rerouted > 100  # about half of 300
    live = fleet.registry.get_sample_value
    assert live("deepagents_rollout_live_workers", {"agent": NAME, "version": "1.3.0"}) == 0
    assert live("deepagents_rollout_live_workers", {"agent": NAME, "version": "1.2.0"}) == 1


async def test_a_worker_names_its_version_again_on_every_heartbeat(
    client: Redis, settings: Settings, prefix: str
) -> None:
    config = rollout_config()
    worker = Worker.from_client(
        StableAgent(client, prefix), client=client, config=config, settings=settings
    )
    rollouts = RedisRollouts(client, Keys(prefix))
    async with running(worker):
        await client.delete(f"{prefix}:agent:{NAME}:versions")  # as a Redis that lost it
        assert await rollouts.live_versions(NAME, 3_000) == {}

        async def named() -> bool:
            return await rollouts.live_versions(NAME, 3_000) == {"1.2.0": 1}

        await eventually(named, timeout=30, what="the version named again")
