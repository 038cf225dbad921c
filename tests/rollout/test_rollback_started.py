"""A started canary task across a rollback: its worker is killed with ``-9`` after the
rollback moved the canary's unstarted tasks to stable. What it held is reclaimed by another
canary worker only, never by stable's, and every task ends with exactly one result."""

from __future__ import annotations

import asyncio
import signal
from collections import defaultdict
from pathlib import Path

from redis.asyncio import Redis

from deepagents.compose import services_for
from deepagents.config import Settings
from deepagents.contract import Task
from deepagents.orchestrator import Orchestrator
from deepagents.orchestrator.rollout_ops import RolloutOps
from deepagents.orchestrator.versions import split
from deepagents.store.rollout_state import RolloutState
from tests.rollout.agents import NAME, StableAgent
from tests.rollout.conftest import live, processes, rollout_config, write_config
from tests.support.replies import as_bytes
from tests.support.wait import eventually


async def runs_by_task(client: Redis, prefix: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for raw in await client.lrange(f"{prefix}:runs", 0, -1):
        task_id, version = as_bytes(raw).decode().split("|")
        out[task_id].append(version)
    return out


async def test_a_started_canary_task_is_finished_only_by_a_canary_worker(
    client: Redis, settings: Settings, prefix: str, redis_url: str, tmp_path: Path
) -> None:
    config = rollout_config(weight=0.5, concurrency=3, auto=False)
    path = write_config(tmp_path / "deepagents.yaml", config)
    with processes(redis_url, prefix, path) as procs:
        stable = procs.worker(
            "tests.rollout.agents:StableAgent", env={"ROLLOUT_TEST_SLEEP": "0.05"}
        )
        doomed = procs.worker("tests.rollout.agents:CanaryAgent", env={"ROLLOUT_TEST_SLEEP": "60"})
        await live(client, prefix, config, {"1.2.0": 1, "1.3.0": 1})
        async with Orchestrator.from_client(
            client, config=config, settings=settings, agents=[StableAgent]
        ) as orch:
            tasks = [Task(intent="canaried", payload={}) for _ in range(60)]
            handles = await orch.submit_many(tasks)

            async def canary_started() -> bool:
                runs = await runs_by_task(client, prefix)
                return sum(1 for v in runs.values() if v == ["1.3.0"]) >= 3

            await eventually(canary_started, timeout=60, what="the canary running tasks")
            ops = RolloutOps(services_for(client, settings), config, "test")
            await ops.rollback(NAME, reason="test")
            started = {t for t, v in (await runs_by_task(client, prefix)).items() if "1.3.0" in v}
            doomed.send_signal(signal.SIGKILL)
            doomed.wait(timeout=10)
            procs.worker("tests.rollout.agents:CanaryAgent", env={"ROLLOUT_TEST_SLEEP": "0.05"})
            results = await asyncio.gather(*(h.result(timeout=120) for h in handles))
        assert stable.poll() is None

    runs = await runs_by_task(client, prefix)
    by_id = {h.task_id: r for h, r in zip(handles, results, strict=True)}
    assert started and started <= set(by_id)
    for task_id in started:
        # Begun on the killed canary worker, finished by the new canary worker: never stable.
        assert runs[task_id] == ["1.3.0", "1.3.0"], runs[task_id]
        assert by_id[task_id].agent_version == "1.3.0"
    for task_id, result in by_id.items():
        assert result.agent_version in runs[task_id]
        if task_id not in started:
            assert runs[task_id] == [result.agent_version]
    # The canary's unstarted tasks went to stable: tasks its split sent to the canary (a
    # task the split sent to stable in the first place proves nothing of the rollback).
    initial = RolloutState.initial(NAME, config.rollouts[NAME])
    for_canary = {t.task_id for t in tasks if split(initial, t) == "1.3.0"}
    moved = [t for t in for_canary - started if by_id[t].agent_version == "1.2.0"]
    assert moved, "the rollback moved none of the canary's unstarted tasks"
