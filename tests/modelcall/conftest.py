"""Fixtures: the model simulator on loopback (its own thread and loop, a free port) and a
factory of ``ModelCalls`` against the real Redis of the session, closed after each test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from redis.asyncio import Redis

from deepagents.modelcall import ModelCalls, ModelConfig
from deepagents.modelcall.simulator import SimSettings, SimulatorThread

FAST = {
    "timeouts": {"total_s": 20, "first_token_s": 5, "per_token_s": 0.5},
    "retry": {"max_retries": 3, "base_s": 0.05, "max_backoff_s": 0.5},
}


@pytest.fixture
def sim() -> Iterator[SimulatorThread]:
    with SimulatorThread(SimSettings(seed=7)) as thread:
        yield thread


def model_config(url: str, **overrides: Any) -> ModelConfig:
    data: dict[str, Any] = {"base_url": url, **FAST}
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return ModelConfig.model_validate(data)


MakeCalls = Callable[..., ModelCalls]

# The hostile cases run against each provider: the same misbehaviour in each API's shapes.
PROVIDERS = ("openai", "anthropic")


@pytest.fixture
async def make_calls(client: Redis, prefix: str) -> AsyncIterator[MakeCalls]:
    made: list[ModelCalls] = []

    def factory(models: dict[str, ModelConfig], **kwargs: Any) -> ModelCalls:
        calls = ModelCalls(models, client, prefix=prefix, **kwargs)
        made.append(calls)
        return calls

    yield factory
    for calls in made:
        await calls.aclose()
