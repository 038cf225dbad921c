"""A configuration with one agent type under a rollout (stable 1.2.0, canary 1.3.0)."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis

from deepagents.config import FileConfig
from tests.rollout.agents import NAME


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
