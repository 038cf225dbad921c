"""End-to-end fixtures: a config file with fast timeouts, worker processes, an orchestrator."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis

from deepagents.config import FileConfig, Settings, load_config
from deepagents.orchestrator import Orchestrator
from tests.support.procs import Procs

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
    async with Orchestrator(client, config=config, settings=settings) as o:
        yield o


TERMINAL = ("succeeded", "failed", "dead_lettered", "expired", "dropped")


async def committed_events(
    client: Redis, prefix: str, agent: str, shards: int
) -> dict[str, list[dict]]:
    """Terminal outbox events per task id: the commit ledger."""
    out: dict[str, list[dict]] = {}
    for shard in range(shards):
        for _, fields in await client.xrange(f"{prefix}:{{{agent}:{shard}}}:audit"):
            for event in orjson.loads(fields[b"events"]):
                if event["type"] in TERMINAL:
                    out.setdefault(event["task_id"], []).append(event)
    return out


async def runs(client: Redis, prefix: str) -> list[tuple[str, int]]:
    """Every execution the LabAgent recorded: (task_id, pid)."""
    out = []
    for item in await client.lrange(f"{prefix}:runs", 0, -1):
        task_id, pid = item.decode().split("|")
        out.append((task_id, int(pid)))
    return out
