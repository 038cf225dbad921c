"""``deepagents worker --processes N``: real processes, a child killed with -9 mid-run.

The supervisor forks a replacement for the dead child; the replacement (same slot, same
consumer name) runs tasks; every task succeeds and is committed exactly once; only tasks
the dead child had started run again. The supervisor's log holds, for each child, its fork
and its time from the fork to ready and to its first task (the figures are measured in
loadtests/bench_startup.py, not asserted here).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from deepagents._internal.redis_server import free_port
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from tests.e2e.conftest import assert_committed_once, committed_events, runs
from tests.support.procs import Procs
from tests.support.wait import eventually, eventually_sync

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PROCESSES = 2  # this machine has 2 cores
SHARDS = 2  # E2E_CONFIG's


def events(procs: Procs, proc: subprocess.Popen[bytes], action: str) -> list[dict[str, Any]]:
    """The supervisor's and its children's JSON log lines with this ``action``."""
    out = []
    for line in procs.log(proc).splitlines():
        if line.startswith("{"):
            record = orjson.loads(line)
            if record.get("action") == action:
                out.append(record)
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_a_killed_child_is_replaced_and_nothing_is_lost_or_committed_twice(
    client: Redis, orch: Orchestrator, procs: Procs, prefix: str
) -> None:
    env = {"DEEPAGENTS_LOG_FORMAT": "json"}
    supervisor = procs.worker("tests.agents:LabAgent", "--processes", str(PROCESSES), env=env)

    async def ready(n: int) -> list[dict[str, Any]]:
        found = events(procs, supervisor, "child_ready")
        return found if len(found) >= n else []

    first = await eventually(lambda: ready(PROCESSES), timeout=60, what="the children ready")
    assert len({r["consumer"] for r in first}) == PROCESSES  # a consumer name each
    handles = await orch.submit_many(
        [Task(intent="lab", payload={"sleep": 0.2}) for _ in range(400)]
    )

    async def mid_run() -> bool:
        return await client.llen(f"{prefix}:runs") >= 60

    await eventually(mid_run, timeout=60, what="the children mid-run")
    victim = first[0]
    os.kill(victim["pid"], signal.SIGKILL)
    started_before = {t for t, _ in await runs(client, prefix)}

    replacement = (await eventually(lambda: ready(PROCESSES + 1), timeout=60))[-1]
    assert replacement["slot"] == victim["slot"]
    assert replacement["consumer"] == victim["consumer"]  # re-reads its pending entries
    assert replacement["pid"] != victim["pid"]
    forks = events(procs, supervisor, "child_forked")
    assert [f["replacing"] for f in forks] == [False] * PROCESSES + [True]
    assert forks[-1]["pid"] == replacement["pid"]

    results = await asyncio.gather(*(h.result(timeout=120) for h in handles))
    assert all(r.status is ResultStatus.SUCCESS for r in results)
    committed = await committed_events(client, prefix, "lab", SHARDS)
    assert_committed_once(committed, [h.task_id for h in handles])
    executions = Counter(t for t, _ in await runs(client, prefix))
    rerun = [t for t, n in executions.items() if n > 1]
    assert rerun, "some tasks in flight in the killed child must have run again"
    assert set(rerun) <= started_before, "only tasks the killed child had started run twice"
    pids = {pid for _, pid in await runs(client, prefix)}
    assert replacement["pid"] in pids, "the replacement ran tasks"
    first_tasks = {e["pid"] for e in events(procs, supervisor, "child_first_task")}
    assert replacement["pid"] in first_tasks  # logged with its time from the fork

    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(60) == 0, procs.output(supervisor)
    children = [r["pid"] for r in events(procs, supervisor, "child_ready")]
    assert not any(alive(pid) for pid in children)


async def test_a_second_signal_kills_the_children(
    client: Redis, orch: Orchestrator, procs: Procs, prefix: str
) -> None:
    env = {"DEEPAGENTS_LOG_FORMAT": "json"}
    supervisor = procs.worker("tests.agents:LabAgent", "--processes", str(PROCESSES), env=env)

    async def ready() -> list[dict[str, Any]]:
        found = events(procs, supervisor, "child_ready")
        return found if len(found) >= PROCESSES else []

    children = [r["pid"] for r in await eventually(ready, timeout=60, what="children ready")]
    # Long tasks: a graceful stop would wait out its grace period for them.
    handles = await orch.submit_many([Task(intent="lab", payload={"sleep": 60}) for _ in range(8)])

    async def running() -> bool:
        return await client.llen(f"{prefix}:runs") >= len(handles)

    await eventually(running, timeout=60, what="the long tasks running")
    supervisor.send_signal(signal.SIGTERM)

    async def stopping() -> bool:
        return bool(events(procs, supervisor, "supervisor_stopping"))

    await eventually(stopping, timeout=30, what="the first signal received")
    supervisor.send_signal(signal.SIGINT)
    assert supervisor.wait(30) == 1, procs.output(supervisor)
    assert not any(alive(pid) for pid in children)
    exits = events(procs, supervisor, "child_exited")
    assert sorted(e["exit_code"] for e in exits) == [-signal.SIGKILL] * PROCESSES


def test_a_child_that_fails_at_once_says_why_in_one_line_and_is_retried_later(
    config_path: Path, tmp_path: Path
) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    procs = Procs({"DEEPAGENTS_REDIS_URL": dead, "DEEPAGENTS_CONFIG": str(config_path)})
    try:
        supervisor = procs.worker(
            "tests.agents:LabAgent", "--processes", "1", env={"DEEPAGENTS_LOG_FORMAT": "json"}
        )

        def replaced() -> list[dict[str, Any]]:
            found = events(procs, supervisor, "child_exited")
            return found if len(found) >= 3 else []

        exits = eventually_sync(replaced, timeout=60, what="three children failed")
        delays = [e["delay_s"] for e in exits[:3]]
        assert delays == sorted(delays) and delays[0] > 0  # a growing delay, never a hot loop
        errors = [line for line in procs.log(supervisor).splitlines() if "error" in line]
        assert any(line.startswith("deepagents: error: cannot reach Redis") for line in errors)
        assert "Traceback" not in procs.log(supervisor)
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(30) == 0
    finally:
        procs.close()
