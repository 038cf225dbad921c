"""Rollback under load, with worker processes: the canary (1.3.0) fails 30% of its tasks,
stable (1.2.0) 1%. The controller rolls the canary back once its error rate has been over
2 x stable's for ``for_s``; every task ends with exactly one result and one run, and the
canary's tasks that had not started when it was rolled back ran on stable."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from pathlib import Path

from redis.asyncio import Redis

from deepagents.compose import services_for
from deepagents.config import Settings
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from deepagents.orchestrator.rollout_controller import RolloutController
from deepagents.orchestrator.rollout_ops import RolloutOps
from deepagents.orchestrator.versions import split
from deepagents.store.lease import RedisLease
from deepagents.store.rollout_state import RolloutState
from deepagents.transport.keys import shard_of
from tests.rollout.agents import NAME, StableAgent
from tests.rollout.conftest import live, processes, rollout_config, rollout_events, write_config
from tests.support.replies import as_bytes
from tests.support.wait import eventually

N = 2_000


async def test_a_failing_canary_is_rolled_back_under_load_and_nothing_is_lost(
    client: Redis, settings: Settings, prefix: str, redis_url: str, tmp_path: Path
) -> None:
    config = rollout_config(
        weight=0.5, window_s=30, min_samples=40, for_s=1, step_s=3_600, concurrency=4
    )
    path = write_config(tmp_path / "deepagents.yaml", config)
    with processes(redis_url, prefix, path, ROLLOUT_TEST_SLEEP="0.02") as procs:
        procs.worker("tests.rollout.agents:StableAgent")
        procs.worker("tests.rollout.agents:CanaryAgent")
        await live(client, prefix, config, {"1.2.0": 1, "1.3.0": 1})
        ops = RolloutOps(services_for(client, settings), config, "controller:test")
        lease = RedisLease(client, f"{prefix}:rollout:lease", "test", 5_000)
        controller = RolloutController(ops, lease, interval_s=0.2)
        stop = asyncio.Event()
        async with Orchestrator.from_client(
            client, config=config, settings=settings, agents=[StableAgent]
        ) as orch:
            tasks = [Task(intent="canaried", payload={"n": i}) for i in range(N)]
            handles = await orch.submit_many(tasks)
            control = asyncio.create_task(controller.run(stop))
            try:

                async def rolled_back() -> bool:
                    return (await ops.state(NAME)).phase == "rolled_back"

                await eventually(rolled_back, timeout=90, what="the rollback")
                results = await asyncio.gather(*(h.result(timeout=180) for h in handles))
            finally:
                stop.set()
                with contextlib.suppress(asyncio.CancelledError):
                    await control

    by_id = {h.task_id: r for h, r in zip(handles, results, strict=True)}
    assert all(r.task_id == task_id for task_id, r in by_id.items())
    assert len(by_id) == N
    runs = Counter(
        tuple(as_bytes(raw).decode().split("|"))
        for raw in await client.lrange(f"{prefix}:runs", 0, -1)
    )
    ran: dict[str, str] = {}
    for (task_id, version), n in runs.items():
        assert n == 1 and task_id not in ran, f"{task_id} ran more than once"
        ran[task_id] = version
    assert set(ran) == set(by_id)  # every task ran exactly once, on one version
    for task_id, result in by_id.items():
        assert result.agent_version == ran[task_id]
        assert result.status in (ResultStatus.SUCCESS, ResultStatus.FAILED)
        shard = shard_of(task_id, config.agent_settings(NAME).shards)
        assert await client.hget(f"{prefix}:{{{NAME}:{shard}}}:t:{task_id}", "state") == b"done"

    initial = RolloutState.initial(NAME, config.rollouts[NAME])
    for_canary = {t.task_id for t in tasks if split(initial, t) == "1.3.0"}
    moved = {t for t in for_canary if ran[t] == "1.2.0"}
    assert moved, "the rollback moved none of the canary's unstarted tasks"
    assert {t for t in by_id if ran[t] == "1.3.0"} <= for_canary

    (rollback,) = [e for e in await rollout_events(client, prefix) if e["decision"] == "rollback"]
    figures = rollback["figures"]
    assert figures["canary"]["samples"] >= 40
    assert figures["canary"]["error_rate"] > 2 * figures["baseline_error_rate"]
    assert figures["unhealthy_for_s"] >= 1
    assert rollback["to_weight"] == 0.0 and rollback["moved_tasks"] > 0
    assert rollback["moved_tasks"] <= len(moved)
