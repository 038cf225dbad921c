"""Fixtures of the telemetry tests: a config with fast timeouts and a simulated model,
worker and exporter processes (always stopped), the model simulator."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from deepagents.modelcall.simulator import SimSettings, SimulatorThread
from tests.support.procs import Procs

CONFIG = """
tiers:
  p0: {{concurrency: 20, max_wait_ms: 60000}}
  p1: {{concurrency: 50, max_wait_ms: 60000}}
  p2: {{concurrency: 100, max_wait_ms: 600000}}
default_tier: p2
defaults:
  shards: 2
  max_deliveries: 2
  visibility_timeout_ms: {vis}
  block_ms: 200
  grace_period_s: 5
  retry: {{base_ms: 20, max_ms: 100}}
agents:
  lab: {{class: "tests.agents:LabAgent"}}
  research: {{class: "agents.research:ResearchAgent"}}
strategies:
  - {{name: urgent, match: {{payload.urgent: true}}, tier: p0}}
models:
  research:
    base_url: "http://127.0.0.1:9/v1"
    max_tokens: 64
    price_in_per_1k: 0.001
    price_out_per_1k: 0.002
    timeouts: {{total_s: 20}}
    limits: {{daily_budget_usd: 5.0}}
"""


def write_config(tmp_path: Path, vis: int = 1000) -> Path:
    path = tmp_path / f"deepagents-{vis}.yaml"
    path.write_text(CONFIG.format(vis=vis))
    return path


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    return write_config(tmp_path)


@pytest.fixture
def sim() -> Iterator[SimulatorThread]:
    with SimulatorThread(SimSettings(seed=7)) as thread:
        yield thread


@pytest.fixture
def procs(redis_url: str, prefix: str, config_path: Path, client: Redis) -> Iterator[Procs]:
    # Depends on `client` so the processes stop before its teardown deletes the test's
    # keys: a worker flushing on its way out must not write after the cleanup.
    p = Procs(
        {
            "DEEPAGENTS_REDIS_URL": redis_url,
            "DEEPAGENTS_PREFIX": prefix,
            "DEEPAGENTS_CONFIG": str(config_path),
            "DEEPAGENTS_OUTBOX": "true",
            "DEEPAGENTS_HEALTH_INTERVAL_S": "0.5",
        }
    )
    try:
        yield p
    finally:
        p.close()
