"""Two ``deepagents scheduler`` processes on one schedule firing every second; the leader is
killed with ``kill -9``: the other takes the lease and fires the missed slots (catch_up:
all), and every slot's task is enqueued exactly once (counted per fire id in the streams)."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis

from deepagents.orchestrator.schedules import fire_id
from tests.e2e.conftest import E2E_CONFIG, worker_procs
from tests.support.procs import Procs
from tests.support.replies import as_bytes, entries
from tests.support.wait import eventually

SCHEDULES = """
schedules:
  tick: {intent: echo, payload: {n: 1}, every_s: 1, catch_up: all}
"""


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "deepagents.yaml"
    path.write_text(E2E_CONFIG + SCHEDULES)
    return path


@pytest.fixture
def procs(redis_url: str, prefix: str, config_path: Path, client: Redis) -> Iterator[Procs]:
    p = worker_procs(redis_url, prefix, config_path)
    try:
        yield p
    finally:
        p.close()


async def _fired(client: Redis, prefix: str) -> Counter[str]:
    """Entries per task id in the echo agent's streams (E2E_CONFIG: two shards; p2)."""
    seen: Counter[str] = Counter()
    for shard in range(2):
        for _, fields in await entries(client, f"{prefix}:{{echo:{shard}}}:p2"):
            seen[orjson.loads(fields[b"task"])["task_id"]] += 1
    return seen


async def test_the_leader_killed_mid_run_no_slot_fires_twice_or_is_lost(
    procs: Procs, client: Redis, prefix: str
) -> None:
    args = ("scheduler", "--interval", "0.1", "--lease-ttl", "2")
    schedulers = {name: procs.cli(*args, "--id", name) for name in ("a", "b")}

    async def leader() -> str | None:
        raw = await client.get(f"{prefix}:schedules:lease")
        return None if raw is None else as_bytes(raw).decode()

    first = str(await eventually(leader, what="a scheduler holding the lease"))
    await eventually(lambda: _at_least(client, prefix, 3), what="three slots fired")
    schedulers[first].send_signal(signal.SIGKILL)
    schedulers[first].wait(10)
    killed_at = len(await _fired(client, prefix))
    survivor = "b" if first == "a" else "a"

    async def taken_over() -> bool:
        return await leader() == survivor

    await eventually(taken_over, what="the survivor taking the lease")
    await eventually(
        lambda: _at_least(client, prefix, killed_at + 4), what="slots fired after the kill"
    )
    schedulers[survivor].send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(schedulers[survivor].wait, 30) == 0, procs.output(
        schedulers[survivor]
    )

    fired = await _fired(client, prefix)
    assert set(fired.values()) == {1}, fired
    slots = sorted(int(task_id.rsplit(".", 1)[1]) for task_id in fired)
    # No slot lost: the survivor fired those that passed while no one led.
    assert slots == list(range(slots[0], slots[-1] + 1000, 1000)), slots
    assert all(fire_id("tick", s) in fired for s in slots)


async def _at_least(client: Redis, prefix: str, n: int) -> bool:
    return len(await _fired(client, prefix)) >= n


def test_a_schedule_no_agent_serves_is_refused_in_one_line(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(E2E_CONFIG + "schedules:\n  lost: {intent: nobody, every_s: 1}\n")
    procs = worker_procs(redis_url, prefix, path)
    try:
        done = procs.run("scheduler")
    finally:
        procs.close()
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "schedules.lost: no agent serves intent 'nobody'" in lines[0]
