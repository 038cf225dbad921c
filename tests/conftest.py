"""Fixtures: a real Redis (DEEPAGENTS_TEST_REDIS_URL, else one started here), a unique key
prefix per test whose keys are deleted afterwards, and a clean DEEPAGENTS_* environment;
a real PostgreSQL (DEEPAGENTS_TEST_DATABASE_URL, else an embedded one); for the cluster
tests, a private redis-server in cluster mode."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis, RedisCluster

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import Settings
from deepagents.store.audit.embedded import EmbeddedPostgres
from deepagents.transport.redis_streams import connect
from tests.support.cluster import running_cluster

_SAVED_ENV = {k: v for k, v in os.environ.items() if k.startswith("DEEPAGENTS_")}


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in _SAVED_ENV:
        if not key.startswith("DEEPAGENTS_TEST_"):
            monkeypatch.delenv(key, raising=False)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    url = _SAVED_ENV.get("DEEPAGENTS_TEST_REDIS_URL")
    if url:
        yield url
        return
    with EmbeddedRedis() as server:
        yield server.url


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    url = _SAVED_ENV.get("DEEPAGENTS_TEST_DATABASE_URL")
    if url:
        yield url
        return
    with EmbeddedPostgres() as server:
        yield server.url


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def client(redis_url: str, prefix: str) -> AsyncIterator[Redis]:
    redis = connect(redis_url)
    try:
        yield redis
    finally:
        keys = [k async for k in redis.scan_iter(match=f"{prefix}:*", count=1000)]
        for i in range(0, len(keys), 500):
            await redis.delete(*keys[i : i + 500])
        await redis.aclose()


@pytest.fixture
def settings(redis_url: str, prefix: str) -> Settings:
    return Settings(redis_url=redis_url, prefix=prefix, outbox=True)


@pytest.fixture(scope="session")
def cluster_url() -> Iterator[str]:
    """One redis-server in cluster mode owning every slot (``tests/support/cluster.py``)."""
    with running_cluster(1) as (server,):
        yield server.url


@pytest.fixture
async def cluster(cluster_url: str, prefix: str) -> AsyncIterator[RedisCluster]:
    """A cluster client (as ``connect(..., cluster=True)`` builds it); the test's keys are
    deleted afterwards."""
    client = RedisCluster.from_url(cluster_url)
    try:
        yield client
    finally:
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
        for key in keys:  # one by one: a DEL of several keys would span slots
            await client.delete(key)
        await client.aclose()
