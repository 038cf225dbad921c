"""A configuration with one agent type under a rollout (stable 1.2.0, canary 1.3.0)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from redis.asyncio import Redis

from deepagents.config import FileConfig
from deepagents.store.rollouts import RedisRollouts
from deepagents.transport.keys import Keys
from tests.rollout.agents import NAME
from tests.support.procs import Procs
from tests.support.replies import entries
from tests.support.wait import eventually


def rollout_config(shards: int = 2, concurrency: int = 8, **rollout: Any) -> FileConfig:
    body = {"stable": "1.2.0", "canary": "1.3.0", "weight": 0.2, **rollout}
    return FileConfig.model_validate(
        {
            "tiers": {"p0": {"concurrency": 4}, "p2": {"concurrency": concurrency}},
            "defaults": {
                "shards": shards,
                "visibility_timeout_ms": 3_000,
                "block_ms": 100,
                "max_backlog": 1_000_000,
            },
            "agents": {NAME: {"class": "tests.rollout.agents:StableAgent"}},
            "rollouts": {NAME: body},
        }
    )


@pytest.fixture
def config() -> FileConfig:
    return rollout_config()


async def stream_lengths(client: Redis, prefix: str, config: FileConfig) -> dict[str, int]:
    """Entries per version ("" = unversioned) over every shard and tier."""
    out: dict[str, int] = {}
    for version in ("", "1.2.0", "1.3.0"):
        total = 0
        for shard in range(config.agent_settings(NAME).shards):
            lane = f"{prefix}:{{{NAME}:{shard}}}" + (f":v:{version}" if version else "")
            for tier in config.tier_names:
                total += await client.xlen(f"{lane}:{tier}")
        out[version] = total
    return out


def write_config(path: Path, config: FileConfig) -> Path:
    """The configuration as a file, for worker and controller processes."""
    body = config.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    path.write_text(yaml.safe_dump(body))
    return path


@contextlib.contextmanager
def processes(redis_url: str, prefix: str, config_path: Path, **env: str) -> Iterator[Procs]:
    procs = Procs(
        {
            "DEEPAGENTS_REDIS_URL": redis_url,
            "DEEPAGENTS_PREFIX": prefix,
            "DEEPAGENTS_CONFIG": str(config_path),
            "DEEPAGENTS_OUTBOX": "true",
            **env,
        }
    )
    try:
        yield procs
    finally:
        procs.close()


async def live(client: Redis, prefix: str, config: FileConfig, versions: dict[str, int]) -> None:
    """Until each version has at least that many workers with a fresh heartbeat."""
    rollouts = RedisRollouts(client, Keys(prefix))
    stale_ms = config.agent_settings(NAME).visibility_timeout_ms

    async def ready() -> bool:
        found = await rollouts.live_versions(NAME, stale_ms)
        return all(found.get(v, 0) >= n for v, n in versions.items())

    await eventually(ready, timeout=60, what=f"live workers {versions}")


async def rollout_events(client: Redis, prefix: str) -> list[dict[str, Any]]:
    """The rollout decisions in the agent's shard-0 outbox, oldest first."""
    out = []
    for _, fields in await entries(client, f"{prefix}:{{{NAME}:0}}:audit"):
        out += [e for e in orjson.loads(fields[b"events"]) if e["type"] == "rollout"]
    return out
