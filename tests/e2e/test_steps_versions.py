"""A task checkpointed under agent version 1 resumes under another version: version 2's
``migrate_state`` hook turns the checkpoint into its own state and the task finishes past
its recorded steps; version 3 cannot migrate it, and the task is dead-lettered
``state_incompatible`` on that first delivery, not retried in a loop."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis

from deepagents.config import Settings, load_config
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator, TaskHandle
from tests.e2e.conftest import worker_procs
from tests.e2e.steps_support import write_config
from tests.steps_agents import STEPS
from tests.support.procs import Procs
from tests.support.replies import as_bytes, entries

V1, V2, V3 = (f"tests.steps_agents:PipelineAgent{v}" for v in ("", "V2", "V3"))


@pytest.fixture
def version_procs(redis_url: str, prefix: str, tmp_path: Path, client: Redis) -> Iterator[Procs]:
    p = worker_procs(redis_url, prefix, write_config(tmp_path))
    try:
        yield p
    finally:
        p.close()


async def _checkpointed_by_v1(orch: Orchestrator, procs: Procs, effects: Path) -> TaskHandle:
    """A task run by version 1 up to its checkpoint, where its worker dies."""
    v1 = procs.worker(V1)
    payload = {"effects": str(effects), "sleep": 0.0, "exit_after_checkpoint": True}
    handle = await orch.submit(Task(intent="pipeline", payload=payload))
    assert v1.wait(60) == 137, procs.output(v1)
    return handle


def _steps_by_pid(effects: Path, task_id: str) -> Counter[int]:
    lines = [line.split(" ") for line in effects.read_text().splitlines()]
    return Counter(int(pid) for key, pid, _ in lines if key.startswith(task_id + "/"))


async def test_a_checkpoint_is_migrated_by_the_new_version_or_dead_lettered(
    client: Redis, prefix: str, version_procs: Procs, tmp_path: Path
) -> None:
    config = load_config(write_config(tmp_path))
    effects = tmp_path / "effects.log"
    async with Orchestrator.from_client(
        client, config=config, settings=Settings(prefix=prefix)
    ) as orch:
        handle = await _checkpointed_by_v1(orch, version_procs, effects)
        v2 = version_procs.worker(V2)
        result = await handle.result(timeout=60)
        assert result.status is ResultStatus.SUCCESS, result
        assert result.output is not None
        assert result.output["state"] == {"completed": 16, "owner": 0, "migrated_from": "1"}
        by_pid = _steps_by_pid(effects, handle.task_id)
        # The 16 steps before the checkpoint ran once, under v1; v2 ran only the last 4.
        assert by_pid[v2.pid] == 4 and sum(by_pid.values()) == STEPS, by_pid
        steps = f"{prefix}:{{pipeline:{handle.shard}}}:s:{handle.task_id}"
        assert await client.hget(steps, "state_version") == b"2"
        v2.terminate()
        assert v2.wait(30) == 0

        broken = await _checkpointed_by_v1(orch, version_procs, effects)
        v3 = version_procs.worker(V3)
        dead = await broken.result(timeout=60)
    assert dead.status is ResultStatus.FAILED and dead.error is not None
    assert dead.error.code == "dead_lettered"
    assert dead.error.message.startswith("state_incompatible: StateIncompatible: ")
    assert "version 3 cannot read a version 1 checkpoint" in dead.error.message
    assert dead.metrics.attempts == 2  # the v1 delivery, then one v3 delivery: no loop
    letters = await entries(client, f"{prefix}:{{pipeline:{broken.shard}}}:dlq")
    reasons = [(f[b"reason"], orjson.loads(f[b"orig_task"])["task_id"]) for _, f in letters]
    assert reasons == [(b"state_incompatible", broken.task_id)]
    # The checkpoint it could not read is still there (a fixed version can be replayed).
    steps = f"{prefix}:{{pipeline:{broken.shard}}}:s:{broken.task_id}"
    assert orjson.loads(as_bytes(await client.hget(steps, "state"))) == {"done": 16, "owner": 0}
    assert await client.ttl(steps) > 0, "the records expire with the dead-lettered result"
    assert v3.poll() is None, "the new version's worker goes on"
