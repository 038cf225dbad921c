"""A dead worker noticed in seconds (issue 38): ``kill -9`` of a worker at the default
settings (a 30 s visibility timeout); its peer sees its registry heartbeat stop, makes its
entries claimable at once and resumes its in-flight task, logging the dead consumer's name.
The time it took is logged (see docs/benchmarks.md for the figure); the test asserts what
happened and in which order, not how fast."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis

from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from tests.e2e.conftest import assert_committed_once, committed_events, registered, runs
from tests.support.procs import Procs
from tests.support.replies import entries
from tests.support.wait import eventually

pytestmark = pytest.mark.slow

# Nothing but the agent and one shard: every timing is the default.
DEFAULTS_CONFIG = """
agents:
  lab: {class: "tests.agents:LabAgent", settings: {shards: 1}}
"""


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "deepagents.yaml"
    path.write_text(DEFAULTS_CONFIG)
    return path


async def test_kill_9_mid_task_resumes_on_a_live_worker_without_the_visibility_timeout(
    client: Redis, orch: Orchestrator, procs: Procs, prefix: str
) -> None:
    assert orch.config.agent_settings("lab").visibility_timeout_ms == 30_000
    doomed = procs.worker("tests.agents:LabAgent", "--consumer", "doomed")
    await registered(client, prefix, "lab", 1)
    handle = await orch.submit(Task(intent="lab", payload={"sleep": 600.0}))

    async def started() -> bool:
        return len(await runs(client, prefix)) >= 1

    await eventually(started, timeout=30, what="the task to start on the doomed worker")
    survivor = procs.worker(
        "tests.agents:LabAgent", "--consumer", "survivor", env={"LAB_SLEEP_CAP": "0.2"}
    )
    await registered(client, prefix, "lab", 2)
    killed_at = time.monotonic()
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.wait(10)
    # Longer than the visibility timeout: the test does not bound the time, the log
    # line below shows which path resumed it.
    result = await handle.result(timeout=90)
    print(f"resumed and finished {time.monotonic() - killed_at:.2f} s after kill -9")

    assert result.status is ResultStatus.SUCCESS
    assert result.output["pid"] == survivor.pid and result.metrics.attempts == 2
    assert [pid for _, pid in await runs(client, prefix)] == [doomed.pid, survivor.pid]
    survivor_log = procs.log(survivor)
    assert "consumer doomed is dead (no registry heartbeat for" in survivor_log
    assert "reclaiming its 1 pending entries now" in survivor_log
    # The audit trail's order: started by the doomed worker, started again by the
    # survivor as the second delivery, succeeded there, once.
    events = [
        (e["type"], e.get("consumer"), e.get("deliveries"))
        for _, fields in await entries(client, f"{prefix}:{{lab:0}}:audit")
        for e in orjson.loads(fields[b"events"])
        if e.get("task_id") == handle.task_id and e["type"] in ("started", "succeeded")
    ]
    assert events == [
        ("started", "doomed", 1),
        ("started", "survivor", 2),
        ("succeeded", "survivor", 2),
    ]
    assert_committed_once(await committed_events(client, prefix, "lab", 1), [handle.task_id])
