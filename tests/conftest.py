"""Fixtures: a real Redis (DEEPAGENTS_TEST_REDIS_URL, else one started here), a unique key
prefix per test whose keys are deleted afterwards, and a clean DEEPAGENTS_* environment;
for the cluster tests, a private redis-server in cluster mode."""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import redis
from redis.asyncio import Redis, RedisCluster

from deepagents._internal.redis_server import EmbeddedRedis, free_port
from deepagents.config import Settings
from deepagents.transport.redis_streams import connect

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
    """A redis-server in cluster mode owning all 16,384 slots. One node is enough: a cluster
    node refuses any command whose keys span slots (CROSSSLOT), whatever the node count."""
    args = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
    with EmbeddedRedis(extra_args=args, port=_cluster_port()) as server:
        node = redis.Redis(port=server.port)
        try:
            # ADDSLOTS with every slot, not ADDSLOTSRANGE: Redis 6.2 knows only this one.
            node.execute_command("CLUSTER", "ADDSLOTS", *range(16384))
            deadline = time.monotonic() + 30
            while b"cluster_state:ok" not in node.execute_command("CLUSTER", "INFO"):
                assert time.monotonic() < deadline, "the one-node cluster never became ready"
                time.sleep(0.05)
        finally:
            node.close()
        yield server.url


def _cluster_port() -> int:
    """A free port whose cluster bus port (10,000 above it) is valid and free too."""
    while True:
        port = free_port()
        if port + 10_000 <= 65_535:
            with contextlib.suppress(OSError), socket.socket() as sock:
                sock.bind(("127.0.0.1", port + 10_000))
                return port


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
