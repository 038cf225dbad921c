"""End-to-end fixtures: a config file with fast timeouts, worker processes, an orchestrator."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import FileConfig, Settings, load_config
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator, TaskHandle
from tests.support.procs import Procs
from tests.support.replies import as_bytes, entries
from tests.support.wait import eventually

E2E_CONFIG = """
tiers:
  p0: {concurrency: 20, max_wait_ms: 60000}
  p1: {concurrency: 50, max_wait_ms: 60000}
  p2: {concurrency: 100, max_wait_ms: 600000}
default_tier: p2
defaults:
  shards: 2
  max_deliveries: 3
  visibility_timeout_ms: 1000
  block_ms: 200
  grace_period_s: 5
  retry: {base_ms: 20, max_ms: 200}
agents:
  lab: {class: "tests.agents:LabAgent"}
  blocking: {class: "tests.agents:BlockingAgent"}
  echo: {class: "agents.echo:EchoAgent"}
strategies:
  - {name: urgent, match: {payload.urgent: true}, tier: p0}
"""


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "deepagents.yaml"
    path.write_text(E2E_CONFIG)
    return path


@pytest.fixture
def config(config_path: Path) -> FileConfig:
    return load_config(config_path)


def worker_procs(redis_url: str, prefix: str, config_path: Path, **env: str) -> Procs:
    """Processes of the real CLI on this Redis, prefix and config, the outbox on."""
    return Procs(
        {
            "DEEPAGENTS_REDIS_URL": redis_url,
            "DEEPAGENTS_PREFIX": prefix,
            "DEEPAGENTS_CONFIG": str(config_path),
            "DEEPAGENTS_OUTBOX": "true",
            **env,
        }
    )


@pytest.fixture
def procs(redis_url: str, prefix: str, config_path: Path, client: Redis) -> Iterator[Procs]:
    # Depends on `client` so the processes stop before its teardown deletes the test's
    # keys: a worker flushing on its way out must not write after the cleanup.
    p = worker_procs(redis_url, prefix, config_path)
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
async def orch(
    client: Redis, config: FileConfig, settings: Settings
) -> AsyncIterator[Orchestrator]:
    async with Orchestrator.from_client(client, config=config, settings=settings) as o:
        yield o


TERMINAL = ("succeeded", "failed", "dead_lettered", "expired", "dropped")


async def committed_events(
    client: Redis, prefix: str, agent: str, shards: int
) -> dict[str, list[dict[str, Any]]]:
    """Terminal outbox events per task id: the commit ledger."""
    out: dict[str, list[dict[str, Any]]] = {}
    for shard in range(shards):
        for _, fields in await entries(client, f"{prefix}:{{{agent}:{shard}}}:audit"):
            for event in orjson.loads(fields[b"events"]):
                if event["type"] in TERMINAL:
                    out.setdefault(event["task_id"], []).append(event)
    return out


async def runs(client: Redis, prefix: str) -> list[tuple[str, int]]:
    """Every execution the LabAgent recorded: (task_id, pid)."""
    out = []
    for item in await client.lrange(f"{prefix}:runs", 0, -1):
        task_id, pid = as_bytes(item).decode().split("|")
        out.append((task_id, int(pid)))
    return out


async def registered(client: Redis, prefix: str, agent: str, n: int) -> None:
    """Until ``n`` workers of ``agent`` are in the registry."""

    async def count() -> bool:
        return int(await client.hlen(f"{prefix}:agent:{agent}:instances")) >= n

    await eventually(count, timeout=30, what=f"{n} {agent} worker(s) registered")


def assert_committed_once(committed: dict[str, list[dict[str, Any]]], task_ids: list[str]) -> None:
    missing = [t for t in task_ids if t not in committed]
    doubled = {t: len(v) for t, v in committed.items() if len(v) != 1}
    assert not missing, f"{len(missing)} tasks have no committed result, e.g. {missing[:3]}"
    assert not doubled, f"tasks committed more than once: {list(doubled.items())[:3]}"


async def kill_9_mid_run(
    client: Redis, orch: Orchestrator, procs: Procs, prefix: str, shards: int
) -> list[TaskHandle]:
    """A LabAgent worker killed with -9 while 300 tasks run, a second one started: every
    task succeeds, is committed once, and only tasks the killed worker had started ran
    again (on the second worker, as attempt 2). Returns the handles."""
    victim = procs.worker("tests.agents:LabAgent")
    await registered(client, prefix, "lab", 1)
    handles = await orch.submit_many(
        [Task(intent="lab", payload={"sleep": 0.3}) for _ in range(300)]
    )

    async def started() -> bool:
        return await client.llen(f"{prefix}:runs") >= 60

    await eventually(started, timeout=30, what="the first worker to be mid-run")
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    before = {t for t, _ in await runs(client, prefix)}
    procs.worker("tests.agents:LabAgent")
    results = await asyncio.gather(*(h.result(timeout=120) for h in handles))

    assert all(r.status is ResultStatus.SUCCESS for r in results)
    committed = await committed_events(client, prefix, "lab", shards)
    assert_committed_once(committed, [h.task_id for h in handles])
    executions = Counter(t for t, _ in await runs(client, prefix))
    rerun = [t for t, n in executions.items() if n > 1]
    assert rerun, "some in-flight tasks of the killed worker must have been run again"
    assert set(rerun) <= before, "only tasks the killed worker had started run twice"
    by_id = {r.task_id: r for r in results}
    assert all(by_id[t].metrics.attempts == 2 for t in rerun)
    assert all(by_id[t].output["pid"] != victim.pid for t in rerun)
    return handles


@pytest.fixture
def durable_dir(tmp_path: Path) -> Path:
    """The data directory of ``durable``: it outlives the server's restarts."""
    path = tmp_path / "redis"
    path.mkdir()
    return path


@pytest.fixture
def durable(durable_dir: Path) -> Iterator[EmbeddedRedis]:
    """A private Redis that fsyncs every write (append-only file) and keeps its directory
    across restarts."""
    args = ("--appendonly", "yes", "--appendfsync", "always")
    server = EmbeddedRedis(extra_args=args, data_dir=str(durable_dir))
    server.start()
    try:
        yield server
    finally:
        server.stop()
