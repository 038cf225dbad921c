"""Fixtures: the model simulator on loopback and a ``ModelCalls`` against the session's real
Redis, made current for the test (``run_tools`` calls models through it)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from deepagents.modelcall import ModelCalls, use_model_calls
from deepagents.modelcall.simulator import SimSettings, SimulatorThread
from tests.modelcall.conftest import model_config


@pytest.fixture
def sim() -> Iterator[SimulatorThread]:
    with SimulatorThread(SimSettings(seed=11)) as thread:
        yield thread


@pytest.fixture
async def calls(client: Redis, prefix: str, sim: SimulatorThread) -> AsyncIterator[ModelCalls]:
    models = {"sim": model_config(sim.url, stream=False, retry={"max_retries": 0})}
    async with ModelCalls(models, client, prefix=prefix) as made:
        with use_model_calls(made):
            yield made


@pytest.fixture
def sim_process() -> Iterator[SimProcess]:
    """``deepagents sim-model`` as its own process on a free loopback port."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "deepagents", "sim-model", "--port", "0", "--seed", "5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        match = re.search(r"(http://127\.0\.0\.1:\d+/v1)", proc.stdout.readline())
        assert match, "the simulator printed no URL"
        yield SimProcess(match.group(1))
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()


@dataclass(frozen=True)
class SimProcess:
    url: str  # the OpenAI base URL, …/v1

    def configure(self, **settings: Any) -> None:
        with httpx.Client(timeout=10) as http:
            http.post(self.url.removesuffix("/v1") + "/sim/settings", json=settings)

    def stats(self) -> dict[str, Any]:
        with httpx.Client(timeout=10) as http:
            answer: dict[str, Any] = http.get(self.url.removesuffix("/v1") + "/sim/stats").json()
            return answer


def write_config(tmp_path: Path, text: str, **values: Any) -> Path:
    path = tmp_path / "deepagents.yaml"
    path.write_text(BASE_CONFIG + text.format(**values))
    return path


BASE_CONFIG = """
tiers:
  p2: {concurrency: 10, max_wait_ms: 600000}
default_tier: p2
defaults:
  shards: 1
  max_deliveries: 3
  visibility_timeout_ms: 2000
  block_ms: 100
  grace_period_s: 5
  retry: {base_ms: 20, max_ms: 200}
"""
