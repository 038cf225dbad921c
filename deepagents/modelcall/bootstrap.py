"""Wiring helpers for the runtime: what a worker (or the demo) wraps its run and its tasks in.

async with model_calls_scope(config.models, redis, prefix=settings.prefix):
    ...                                     # the worker's whole run, in its one loop
    with usage_scope() as usage:            # around each task's contract
        result = await runner.run(task)
    result = usage.apply(result)            # tokens_used, cost_usd, degraded
    events += usage.audit_events(task.task_id)   # model_call events for the outbox
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from deepagents.config.models import ModelConfig
from deepagents.errors import ConfigError
from deepagents.modelcall.usage import use_model_calls
from deepagents.store.models import RedisClient

if TYPE_CHECKING:
    from deepagents.modelcall.calls import ModelCalls

# The model the ResearchAgent asks for, when the demo runs against the simulator and the
# configuration names none.
DEMO_MODEL = "research"


@contextlib.asynccontextmanager
async def model_calls_scope(
    models: Mapping[str, ModelConfig], redis: RedisClient | None, *, prefix: str, **options: Any
) -> AsyncIterator[ModelCalls | None]:
    """``ModelCalls`` for this loop, current in this context (tasks created inside inherit
    it), closed on exit; ``None`` when no model is configured. ``options`` go to
    ``ModelCalls`` (``metrics=ModelMetrics(registry)``, ``prompt_hash_key=...``)."""
    if not models:
        yield None
        return
    if redis is None:
        # The gates (breaker, budgets, quotas) and credential locks are shared in Redis.
        raise ConfigError("model calls need Redis: in-memory services have none")
    # Imported only with models configured: the HTTP client (httpx) is the calls' cost.
    from deepagents.modelcall.calls import ModelCalls

    async with ModelCalls(models, redis, prefix=prefix, **options) as calls:
        with use_model_calls(calls):
            yield calls


def simulator_models(models: Mapping[str, ModelConfig], url: str) -> dict[str, ModelConfig]:
    """The models pointed at the model SIMULATOR at ``url`` (the demo): same limits and
    prices, no key (the simulator needs none), and a ``research`` model when none is set."""
    pointed = {
        name: model.model_copy(update={"base_url": url, "api_key_env": None, "vault": None})
        for name, model in models.items()
    }
    if DEMO_MODEL not in pointed:
        pointed[DEMO_MODEL] = ModelConfig.model_validate(
            {
                "base_url": url,
                "max_tokens": 256,
                "price_in_per_1k": 0.0005,
                "price_out_per_1k": 0.0015,
                "timeouts": {"total_s": 10},
            }
        )
    return pointed
