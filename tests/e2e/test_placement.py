"""Issue 22: placement. A worker started with ``--tiers``/``--shards`` reads only those
streams; its delayed pump covers the shards it reads; the registry records what each live
instance reads, and ``deepagents status`` and the exporter name a stream no one reads.
Real Redis; in-process workers, and real worker processes for the CLI's view."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from agents.echo import EchoAgent
from deepagents.compose import services_for
from deepagents.config import FileConfig, Settings, parse_config
from deepagents.config.placement import Placement
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from deepagents.orchestrator.admin import Admin
from deepagents.orchestrator.coverage import coverage
from deepagents.worker import Assignment, Worker
from tests.cli.support import clean_env, deepagents
from tests.e2e.overdue_agents import NapAgent
from tests.support.procs import Procs
from tests.support.wait import eventually
from tests.support.workers import running

CONFIG = """
tiers:
  p0: {concurrency: 10, max_wait_ms: 60000}
  p1: {concurrency: 10, max_wait_ms: 60000}
  p2: {concurrency: 10, max_wait_ms: 60000}
defaults: {shards: 2, block_ms: 100, visibility_timeout_ms: 3000, retry: {base_ms: 20}}
agents:
  echo: {class: "agents.echo:EchoAgent"}
  nap: {class: "tests.e2e.overdue_agents:NapAgent", settings: {shards: 1}}
"""
# p0 is a pool of one that degrades: a task behind one that sleeps (on nap's only shard,
# so that it waits for the same reader) moves to p1.
MOVING = CONFIG.replace(
    "p0: {concurrency: 10, max_wait_ms: 60000}",
    "p0: {concurrency: 1, max_wait_ms: 600, on_overdue: degrade}",
)


@pytest.fixture
def config() -> FileConfig:
    return parse_config(CONFIG)


def _placed(
    agent: Any, client: Redis, config: FileConfig, settings: Settings, tiers: tuple[str, ...]
) -> Worker:
    placement = Placement(tiers, tuple(range(config.agent_settings(agent.name).shards)))
    return Worker.from_client(
        agent, client=client, config=config, settings=settings, assignment=Assignment(placement)
    )


async def _streams(client: Redis, config: FileConfig, settings: Settings) -> dict[str, Any]:
    """Per tier, summed over shards: length, pending and consumers of the group."""
    rows = await Admin.from_client(client, config, settings).status("echo")
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        tier = out.setdefault(r["tier"], {"length": 0, "pending": 0, "consumers": 0})
        for column in tier:
            tier[column] += r[column]
    return out


async def test_a_p0_only_worker_reads_only_p0(
    client: Redis, orch: Orchestrator, config: FileConfig, settings: Settings
) -> None:
    routine = [await orch.submit(Task(intent="echo", priority=1)) for _ in range(10)]
    async with running(_placed(EchoAgent(), client, config, settings, ("p0",))):
        urgent = [await orch.submit(Task(intent="echo", priority=0)) for _ in range(10)]
        for handle in urgent:
            assert (await handle.result(timeout=30)).status is ResultStatus.SUCCESS
        # Every p0 task is done; the p1 ones, queued before them, were never touched.
        for handle in routine:
            info = await orch.lookup(handle.task_id)
            assert info is not None and info["state"] == "queued"
        streams = await _streams(client, config, settings)
        assert streams["p1"] == {"length": 10, "pending": 0, "consumers": 0}
        assert streams["p0"]["consumers"] == 2  # one per shard: this worker
        covered = await coverage(services_for(client, settings).registry, config, "echo")
        assert covered.unread_tiers() == ["p1", "p2"] and covered.unread_shards() == []
        assert covered.readers[("p0", 0)] == covered.readers[("p0", 1)] == 1
        # A p1 reader comes: the routine tasks were kept for it, and run.
        async with running(_placed(EchoAgent(), client, config, settings, ("p1",))):
            for handle in routine:
                assert (await handle.result(timeout=30)).status is ResultStatus.SUCCESS


async def test_a_p0_only_pools_tier_moves_wait_in_p1_for_a_p1_reader(
    client: Redis, settings: Settings
) -> None:
    """p0 degrades an overdue task to p1 through its shard's delayed set: the p0 pool's own
    pump promotes it (it reads that shard), and it waits in p1 for whoever reads p1."""
    config = parse_config(MOVING)
    async with (
        Orchestrator.from_client(client, config=config, settings=settings) as orch,
        running(_placed(NapAgent(), client, config, settings, ("p0",))),
    ):
        nap = await orch.submit(Task(intent="nap", priority=0, payload={"sleep": 1.5}))
        late = await orch.submit(Task(intent="nap", priority=0, payload={"n": 2}))
        await nap.result(timeout=30)
        keys = services_for(client, settings).keys.shard("nap", late.shard)

        async def moved_to_p1() -> bool:
            in_p1 = await client.xlen(keys.stream("p1"))
            return in_p1 == 1 and await client.zcard(keys.delayed) == 0

        await eventually(moved_to_p1, timeout=30, what="the overdue task promoted into p1")
        info = await orch.lookup(late.task_id)
        assert info is not None and info["state"] != "done"  # nobody here reads p1
        async with running(_placed(NapAgent(), client, config, settings, ("p1",))):
            result = await late.result(timeout=30)
    assert result.status is ResultStatus.SUCCESS and result.output == {"n": 2, "path": "execute"}


# the CLI: real worker processes, `deepagents status` and `deepagents exporter` ----------


@pytest.fixture
def env(tmp_path: Path, redis_url: str, prefix: str) -> dict[str, str]:
    path = tmp_path / "deepagents.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    return clean_env(
        DEEPAGENTS_REDIS_URL=redis_url,
        DEEPAGENTS_PREFIX=prefix,
        DEEPAGENTS_CONFIG=str(path),
        PYTHONIOENCODING="utf-8",
        COLUMNS="200",
    )


@pytest.fixture
def procs(env: dict[str, str], client: Redis) -> Iterator[Procs]:
    p = Procs(env)  # after `client`: the workers stop before its teardown deletes the keys
    try:
        yield p
    finally:
        p.close()


async def _cli(env: dict[str, str], *args: str) -> str:
    done = await asyncio.to_thread(deepagents, *args, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_status_and_the_exporter_name_a_shard_no_live_worker_reads(
    procs: Procs, env: dict[str, str]
) -> None:
    procs.worker("agents.echo:EchoAgent", "--shards", "0")

    async def rows() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = orjson.loads(await _cli(env, "status", "--json", "--all"))
        echo = [r for r in found if r["agent"] == "echo"]
        return echo if any(r["readers"] for r in echo) else []

    echo = await eventually(rows, timeout=60, what="the shard-0 worker in the registry")
    readers = {(r["tier"], r["shard"]): r["readers"] for r in echo}
    assert readers == {(t, s): 1 - s for t in ("p0", "p1", "p2") for s in (0, 1)}
    plain = await _cli(env, "status", "--agent", "echo")
    assert "echo: shard 1 (every tier)" in plain
    assert "echo: tier" not in plain  # every tier has a reader on shard 0
    exported = await _cli(env, "exporter", "--once")
    assert 'deepagents_stream_readers{agent="echo",shard="1",tier="p0"} 0.0' in exported
    assert 'deepagents_stream_readers{agent="echo",shard="0",tier="p0"} 1.0' in exported


async def test_a_p0_only_worker_process_leaves_p1_to_others(
    procs: Procs, env: dict[str, str], client: Redis, config: FileConfig, settings: Settings
) -> None:
    """The same through the CLI: ``deepagents worker … --tiers p0`` in its own process."""
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        routine = [await orch.submit(Task(intent="echo", priority=1)) for _ in range(5)]
        procs.worker("agents.echo:EchoAgent", "--tiers", "p0")
        urgent = [await orch.submit(Task(intent="echo", priority=0)) for _ in range(5)]
        for handle in urgent:
            assert (await handle.result(timeout=60)).status is ResultStatus.SUCCESS
        for handle in routine:
            info = await orch.lookup(handle.task_id)
            assert info is not None and info["state"] == "queued"
    assert (await _streams(client, config, settings))["p1"]["length"] == 5
    plain = await _cli(env, "status")
    assert "echo: tier p1 (every shard)" in plain and "echo: tier p2 (every shard)" in plain
    assert "echo: tier p0" not in plain


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--tiers", "p0,p9", "--tiers: unknown tier 'p9'; the configured tiers are p0, p1, p2"),
        ("--shards", "0,2", "--shards: '2' is out of range; this agent has 2 shards (0-1)"),
        ("--shards", "one", "--shards: 'one' must be N or N-M"),
    ],
)
def test_a_bad_placement_is_one_clear_line(
    env: dict[str, str], flag: str, value: str, said: str
) -> None:
    done = deepagents("worker", "agents.echo:EchoAgent", flag, value, env=env)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], done.stderr
