"""A healthy canary is promoted step by step (20% -> 25% -> 50% -> 100%) by the controller
while load runs, with worker processes of both versions; at 100% it becomes stable, and new
tasks run on it. Each step is in the audit log with the figures behind it."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from redis.asyncio import Redis

from deepagents.compose import services_for
from deepagents.config import Settings
from deepagents.contract import Task
from deepagents.orchestrator import Orchestrator, TaskHandle
from deepagents.orchestrator.rollout_controller import RolloutController
from deepagents.orchestrator.rollout_ops import RolloutOps
from deepagents.store.lease import RedisLease
from tests.rollout.agents import NAME, StableAgent
from tests.rollout.conftest import live, processes, rollout_config, rollout_events, write_config
from tests.support.wait import eventually


async def test_a_healthy_canary_is_promoted_in_steps_to_100(
    client: Redis, settings: Settings, prefix: str, redis_url: str, tmp_path: Path
) -> None:
    config = rollout_config(
        weight=0.2,
        steps=[0.25, 0.5, 1.0],
        step_s=1,
        window_s=5,
        min_samples=30,
        min_error_rate=0.05,
        for_s=60,
    )
    path = write_config(tmp_path / "deepagents.yaml", config)
    with processes(redis_url, prefix, path, ROLLOUT_TEST_SLEEP="0.01") as procs:
        procs.worker("tests.rollout.agents:StableAgent")
        procs.worker("tests.rollout.agents:HealthyCanaryAgent")
        await live(client, prefix, config, {"1.2.0": 1, "1.3.0": 1})
        ops = RolloutOps(services_for(client, settings), config, "controller:test")
        controller = RolloutController(
            ops, RedisLease(client, f"{prefix}:rollout:lease", "test", 5_000), interval_s=0.2
        )
        stop = asyncio.Event()
        async with Orchestrator.from_client(
            client, config=config, settings=settings, agents=[StableAgent]
        ) as orch:
            handles: list[TaskHandle] = []

            async def load() -> None:
                while not stop.is_set():
                    batch = [Task(intent="canaried", payload={}) for _ in range(40)]
                    handles.extend(await orch.submit_many(batch))
                    await asyncio.sleep(0.1)

            submitting = asyncio.create_task(load())
            control = asyncio.create_task(controller.run(stop))
            try:

                async def promoted() -> bool:
                    return (await ops.state(NAME)).phase == "promoted"

                await eventually(promoted, timeout=120, what="the promotion to 100%")
                await eventually(
                    lambda: _routes_promoted(orch), timeout=30, what="routing by the promotion"
                )
                after = await orch.submit_many(
                    [Task(intent="canaried", payload={}) for _ in range(50)]
                )
            finally:
                stop.set()
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.gather(submitting, control)
            results = await asyncio.gather(*(h.result(timeout=120) for h in [*handles, *after]))

    state = await ops.state(NAME)
    assert (state.stable, state.canary, state.previous) == ("1.3.0", None, "1.2.0")
    steps = [
        (e["decision"], e["from_weight"], e["to_weight"], e["phase"])
        for e in await rollout_events(client, prefix)
        if e["decision"] in ("promote", "complete")
    ]
    assert steps == [
        ("promote", 0.2, 0.25, "canary"),
        ("promote", 0.25, 0.5, "canary"),
        ("complete", 0.5, 0.0, "promoted"),
    ]
    for event in await rollout_events(client, prefix):
        if event["decision"] in ("promote", "complete"):
            assert event["figures"]["canary"]["samples"] >= 30
            assert event["by"] == "controller:test"
    assert {r.agent_version for r in results[-50:]} == {"1.3.0"}
    assert len({r.task_id for r in results}) == len(results)


async def _routes_promoted(orch: Orchestrator) -> bool:
    """The orchestrator's routing snapshot (refreshed every second) has the promotion: its
    new tasks go to 1.3.0."""
    assert orch.versions is not None
    snapshot = orch.versions.snapshots.get(NAME)
    return snapshot is not None and snapshot.state.phase == "promoted"
