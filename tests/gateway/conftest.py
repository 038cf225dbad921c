"""Module-scoped real processes: one gateway (uvicorn subprocess) and workers per module,
each module under its own key prefix, deleted afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from tests.gateway.procs import Gateway, Proc, config_yaml, env_for, start_gateway, start_worker


@dataclass
class Deployment:
    redis_url: str
    prefix: str
    config: Path
    env: dict[str, str]
    redis: redis.Redis

    def stream_lengths(self) -> dict[str, int]:
        """Every stream under this prefix (tiers, delayed, DLQ, outbox) with its length."""
        out = {}
        for key in self.redis.scan_iter(match=f"{self.prefix}:*", count=1000, _type="stream"):
            out[key.decode()] = int(self.redis.xlen(key))
        return out

    def queued_entries(self) -> int:
        return sum(
            n for k, n in self.stream_lengths().items() if k.rsplit(":", 1)[-1].startswith("p")
        )


def make_deployment(redis_url: str, config_text: str) -> Iterator[Deployment]:
    prefix = f"g{uuid.uuid4().hex[:10]}"
    from tests.gateway.procs import write_config

    config = write_config(config_text)
    client = redis.Redis.from_url(redis_url)
    try:
        yield Deployment(redis_url, prefix, config, env_for(redis_url, prefix, config), client)
    finally:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])
        client.close()
        config.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def deployment(redis_url: str) -> Iterator[Deployment]:
    yield from make_deployment(redis_url, config_yaml())


@pytest.fixture(scope="module")
def gateway(deployment: Deployment) -> Iterator[Gateway]:
    with start_gateway(deployment.env) as gw:
        yield gw


@pytest.fixture(scope="module")
def echo_worker(deployment: Deployment) -> Iterator[Proc]:
    with start_worker(deployment.env, "agents.echo:EchoAgent") as proc:
        yield proc


@pytest.fixture(scope="module")
def probe_worker(deployment: Deployment) -> Iterator[Proc]:
    with start_worker(deployment.env, "deepagents.gateway.probe:ProbeAgent") as proc:
        yield proc
