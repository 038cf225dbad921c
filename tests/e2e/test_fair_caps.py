"""A per-key cap on running tasks in a fair tier (``fair_share: {max_running_per_key: 2}``),
with two real worker processes: tenant A never has more than two tasks running at once
across both while B's run beside them, and after ``kill -9`` of a worker running A's tasks,
A's tasks all complete (the slots its dead worker held are counted from the stream's PEL,
so they free when the reclaimed tasks end, and nothing stays stuck at the cap)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from redis.asyncio import Redis

from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from tests.e2e.conftest import registered
from tests.support.procs import Procs
from tests.support.wait import eventually

pytestmark = pytest.mark.slow

AGENT = "tests.support.delegation:HelperAgent"
CAPPED_CONFIG = """
tiers:
  p2: {concurrency: 10, fair_share: {max_running_per_key: 2}}
default_tier: p2
defaults: {shards: 1, block_ms: 200, visibility_timeout_ms: 1000}
agents:
  helper: {class: "tests.support.delegation:HelperAgent"}
"""


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "deepagents.yaml"
    path.write_text(CAPPED_CONFIG)
    return path


def _lines(path: Path) -> list[list[str]]:
    """The start (``start <id> <pid>``) and end (``end <id>``) lines, in order."""
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def _most_running(lines: list[list[str]], ids: set[str]) -> int:
    """The most of ``ids`` started and not ended at one time (a task begun again after its
    worker died is still the one task)."""
    running: set[str] = set()
    most = 0
    for kind, task_id, *_ in lines:
        if task_id in ids:
            running.add(task_id) if kind == "start" else running.discard(task_id)
            most = max(most, len(running))
    return most


async def test_a_capped_tenant_runs_two_at_a_time_beside_others_and_survives_a_kill_9(
    client: Redis, orch: Orchestrator, procs: Procs, prefix: str, tmp_path: Path
) -> None:
    effects = tmp_path / "effects"
    procs.worker(AGENT, "--consumer", "first")
    procs.worker(AGENT, "--consumer", "second")
    await registered(client, prefix, "helper", 2)

    def task(tenant: str, sleep: float) -> Task:
        return Task(intent="help", tenant=tenant, payload={"effects": str(effects), "sleep": sleep})

    handles = await orch.submit_many([task("A", 0.4) for _ in range(6)])
    handles += await orch.submit_many([task("B", 0.2) for _ in range(6)])
    a_ids = {h.task_id for h in handles[:6]}
    b_ids = {h.task_id for h in handles[6:]}

    async def a_at_its_cap() -> bool:
        return _most_running(_lines(effects), a_ids) >= 2

    await eventually(a_at_its_cap, timeout=30, what="two of A's tasks running")
    pid = next(int(line[2]) for line in _lines(effects) if line[1] in a_ids)
    os.kill(pid, signal.SIGKILL)

    for handle in handles:
        assert (await handle.result(timeout=60)).status == ResultStatus.SUCCESS
    lines = _lines(effects)
    ended = {line[1] for line in lines if line[0] == "end"}
    assert ended >= a_ids | b_ids
    assert _most_running(lines, a_ids) == 2, lines
    # B did not wait behind A's cap: all of B's had ended before A's last began.
    last_a_start = max(i for i, line in enumerate(lines) if line[0] == "start" and line[1] in a_ids)
    b_ends = [i for i, line in enumerate(lines) if line[0] == "end" and line[1] in b_ids]
    assert max(b_ends) < last_a_start, lines
