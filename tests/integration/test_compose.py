"""The composition root: services built once from the settings, shared by the components
given them, and closed by whoever opened them."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio import Redis

from agents.echo import EchoAgent
from deepagents.compose import open_services, services_for
from deepagents.config import FileConfig, Settings, load_config
from deepagents.contract import Task
from deepagents.errors import ConfigError
from deepagents.orchestrator import Orchestrator
from deepagents.store.tasks import Location, decode_location, encode_location
from tests.support.workers import running_worker

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def config() -> FileConfig:
    return load_config(REPO / "config" / "deepagents.yaml")


def test_a_location_record_decodes_to_what_was_encoded() -> None:
    where = Location("risk", 3, "p0")
    assert encode_location(where) == "risk|3|p0"
    assert decode_location(encode_location(where).encode()) == where


async def test_from_settings_opens_its_own_client_and_closes_it(
    client: Redis, config: FileConfig, settings: Settings
) -> None:
    async with running_worker(client, settings, config, EchoAgent()):
        orch = Orchestrator.from_settings(settings, config=config)
        async with orch:
            handle = await orch.submit(Task(intent="echo", payload={"n": 1}))
            result = await handle.result(timeout=30)
            info = await orch.lookup(handle.task_id)
        assert result.status.value == "success" and result.output["n"] == 1
        assert info is not None and info["state"] == "done"
        assert (info["agent"], info["shard"], info["submitted_tier"]) == (
            handle.agent,
            handle.shard,
            handle.tier,
        )
        assert orch.services.owns_client and orch.services.client is not None
        # Closed with the orchestrator: no connection of its pool is open any more.
        pool = orch.services.client.connection_pool
        assert pool._available_connections  # it did talk to Redis through the pool
        assert not pool._in_use_connections
        assert not any(c.is_connected for c in pool._available_connections)


async def test_services_given_to_a_component_outlive_it(
    client: Redis, config: FileConfig, settings: Settings
) -> None:
    services = services_for(client, settings)
    try:
        async with Orchestrator(services, config=config, settings=settings) as orch:
            first = await orch.submit(Task(intent="echo", payload={}))
            # The submit went over the bus's own connections: a lookup uses the client's.
            assert await orch.lookup(first.task_id) is not None
        # The orchestrator did not close what it was given (redis-py would reconnect a
        # closed client unseen, so look at its pool), and a second one submits through it.
        pool = client.connection_pool
        assert any(c.is_connected for c in pool._available_connections)
        async with Orchestrator(services, config=config, settings=settings) as orch:
            second = await orch.submit(Task(intent="echo", payload={}))
        assert await services.tasks.location(first.task_id) is not None
        assert await services.tasks.location(second.task_id) is not None
    finally:
        await services.aclose()
    # Closing the services leaves the client the caller opened (and closes) open.
    assert any(c.is_connected for c in pool._available_connections)


def test_open_services_without_a_redis_url_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="DEEPAGENTS_REDIS_URL is not set"):
        open_services(Settings(redis_url=None))
