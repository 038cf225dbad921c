"""Fixtures: the model simulator on loopback and a ``ModelCalls`` against the session's real
Redis, made current for the test (``run_tools`` calls models through it)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

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
