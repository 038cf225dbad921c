"""The wiring helpers the worker and the demo use."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from agents.research import ResearchAgent
from deepagents.contract.result import Result
from deepagents.contract.task import Task
from deepagents.errors import ConfigError
from deepagents.modelcall import current_model_calls, usage_scope
from deepagents.modelcall.bootstrap import model_calls_scope, simulator_models
from deepagents.modelcall.simulator import SimulatorThread
from tests.modelcall.conftest import model_config


async def test_scope_sets_and_closes_model_calls(
    sim: SimulatorThread, client: Redis, prefix: str
) -> None:
    models = simulator_models(
        {"research": model_config("http://10.0.0.1/v1", api_key_env="NOT_SET")}, sim.url
    )
    assert str(models["research"].base_url).startswith(sim.url)
    assert models["research"].api_key_env is None
    task = Task(intent="research", payload={"topic": "fx", "text": "rates rose and rates fell"})
    async with model_calls_scope(models, client, prefix=prefix) as calls:
        assert calls is not None and current_model_calls() is calls
        with usage_scope() as usage:
            result = await ResearchAgent().execute({"task": task, "payload": task.payload})
        final = usage.apply(Result(output=result.output))
    assert calls.closed and current_model_calls() is None
    assert not result.degraded and final.metrics.tokens_used == result.metrics.tokens_used > 0
    assert [e.type for e in usage.audit_events(task.task_id)] == ["model_call"]


async def test_no_models_no_calls(client: Redis, prefix: str) -> None:
    async with model_calls_scope({}, client, prefix=prefix) as calls:
        assert calls is None and current_model_calls() is None


def test_demo_model_added_for_the_simulator() -> None:
    models = simulator_models({}, "http://127.0.0.1:9/v1")
    assert list(models) == ["research"]


async def test_model_calls_without_redis_are_refused_in_one_line() -> None:
    models = {"research": model_config("http://127.0.0.1:9/v1", api_key_env="NOT_SET")}
    refusal = r"^model calls need Redis: in-memory services have none$"
    with pytest.raises(ConfigError, match=refusal):
        async with model_calls_scope(models, None, prefix="t"):
            raise AssertionError("unreachable: the scope must refuse to open")
