"""The context budget: a 50-turn conversation stays inside the model's context window with
the budget middleware (older turns summarised through the chain by the configured model),
and hits the model's context error without it. Real Redis, real worker processes, the
model simulator as its own process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from deepagents.config import Settings, load_config
from deepagents.contract import ResultStatus
from deepagents.errors import ErrorCode
from deepagents.orchestrator import Orchestrator
from tests.agentkit.conftest import SimProcess, write_config
from tests.e2e.conftest import registered, worker_procs
from tests.support.procs import Procs

TURNS = 50
WINDOW = 1200
CONFIG = """
agents:
  chat_budget:
    class: "tests.agentkit.agents:ChatAgent"
    middleware:
      - {{name: context_budget, strategy: summarise, model: chat, keep_last: 4,
          window_tokens: 1200}}
  chat_plain: {{class: "tests.agentkit.agents:PlainChatAgent"}}
models:
  chat:
    base_url: "{url}"
    context_tokens: 100000  # the simulator's own window (1200) is the one that refuses
    stream: false
    timeouts: {{total_s: 30}}
"""


@pytest.fixture
def config_path(tmp_path: Path, sim_process: SimProcess) -> Path:
    sim_process.configure(context_tokens=WINDOW)  # a longer prompt: context_length_exceeded
    return write_config(tmp_path, CONFIG, url=sim_process.url)


@pytest.fixture
def procs(redis_url: str, prefix: str, config_path: Path, client: Redis) -> Iterator[Procs]:
    p = worker_procs(redis_url, prefix, config_path)
    try:
        yield p
    finally:
        p.close()


async def _converse(client: Redis, prefix: str, config_path: Path, agent: str) -> dict[str, Any]:
    settings = Settings(prefix=prefix, outbox=True)
    config = load_config(config_path)
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        handle = await orch.submit({"intent": agent, "payload": {"turns": TURNS}})
        result = await handle.result(timeout=120)
    return result.model_dump(mode="json")


async def test_fifty_turns_stay_inside_the_window_with_the_budget(
    client: Redis, prefix: str, config_path: Path, procs: Procs, sim_process: SimProcess
) -> None:
    procs.worker("tests.agentkit.agents:ChatAgent")
    await registered(client, prefix, "chat_budget", 1)
    result = await _converse(client, prefix, config_path, "chat_budget")
    assert result["status"] == ResultStatus.SUCCESS, result["error"]
    assert result["output"]["turns"] == TURNS
    assert result["output"]["summaries"] > 0
    stats = sim_process.stats()
    # The model never refused a prompt as too long; the summaries were calls of their own.
    assert stats["statuses"] == {"200": stats["requests"]}
    assert stats["requests"] > TURNS


async def test_without_the_budget_the_conversation_hits_the_context_error(
    client: Redis, prefix: str, config_path: Path, procs: Procs, sim_process: SimProcess
) -> None:
    procs.worker("tests.agentkit.agents:PlainChatAgent")
    await registered(client, prefix, "chat_plain", 1)
    result = await _converse(client, prefix, config_path, "chat_plain")
    assert result["status"] == ResultStatus.FAILED
    assert result["error"]["code"] == ErrorCode.INVALID_INPUT
    assert "ContextLengthExceeded" in result["error"]["message"]
    stats = sim_process.stats()
    assert stats["statuses"]["400"] == 1 and stats["requests"] < TURNS
