"""Issue 24 item 4: a research worker with no credential for its models says so once per
model at start (before, it started silently and every task came back degraded)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis.asyncio import Redis

from deepagents.store.registry import AgentRegistry
from deepagents.transport.keys import Keys
from tests.cli.support import CONFIG, clean_env
from tests.support.procs import Procs
from tests.support.wait import eventually

WARNING = "has no credential: environment variable SIM_API_KEY is not set"


@pytest.fixture
def procs(redis_url: str, prefix: str, client: Redis) -> Iterator[Procs]:
    env = clean_env(
        DEEPAGENTS_REDIS_URL=redis_url, DEEPAGENTS_PREFIX=prefix, DEEPAGENTS_CONFIG=str(CONFIG)
    )
    env.pop("SIM_API_KEY", None)
    p = Procs(env)
    try:
        yield p
    finally:
        p.close()


async def _registered(client: Redis, prefix: str) -> None:
    registry = AgentRegistry(client, Keys(prefix))

    async def up() -> bool:
        return bool((await registry.agents()).get("research", {}).get("instances"))

    await eventually(up, timeout=60, what="the research worker registered")


async def test_a_model_without_its_key_is_named_once(
    procs: Procs, client: Redis, prefix: str
) -> None:
    proc = procs.worker("agents.research:ResearchAgent")
    await _registered(client, prefix)
    lines = [line for line in procs.output(proc).splitlines() if WARNING in line]
    # both models of the example config, each named once
    assert len(lines) == 2, procs.output(proc)
    assert "'research'" in lines[0] and "'research-backup'" in lines[1]


async def test_a_model_with_its_key_is_not_warned_about(
    procs: Procs, client: Redis, prefix: str
) -> None:
    proc = procs.worker("agents.research:ResearchAgent", env={"SIM_API_KEY": "sk-test"})
    await _registered(client, prefix)
    assert "has no credential" not in procs.output(proc)
