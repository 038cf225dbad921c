"""Redis down under the gateway (RELIABILITY.md row 16): submits are refused with 503 and
``Retry-After``, ``/health`` names the failed hop, and both recover once Redis is back,
without restarting the gateway."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest
import redis

from deepagents._internal.redis_server import EmbeddedRedis
from tests.gateway.procs import Gateway, auth, config_yaml, env_for, start_gateway, write_config
from tests.support.wait import eventually_sync


@pytest.fixture
def redis_server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis() as server:
        yield server


@pytest.fixture
def gateway(redis_server: EmbeddedRedis) -> Iterator[Gateway]:
    config = write_config(config_yaml())
    env = env_for(redis_server.url, f"g{uuid.uuid4().hex[:10]}", config)
    try:
        with start_gateway(env) as gw:
            yield gw
    finally:
        config.unlink(missing_ok=True)


def _submit(gw: Gateway) -> httpx.Response:
    return httpx.post(
        gw.url + "/v1/tasks", json={"intent": "echo", "payload": {}}, headers=auth(), timeout=15
    )


def test_redis_down_is_a_503_with_retry_after_then_recovers(
    gateway: Gateway, redis_server: EmbeddedRedis
) -> None:
    assert _submit(gateway).status_code == 202
    port = redis_server.port
    redis_server.stop()

    refused = _submit(gateway)
    assert refused.status_code == 503, refused.text
    assert refused.headers["Retry-After"] == "1"
    assert refused.json()["code"] == "unavailable"
    health = httpx.get(gateway.url + "/health", timeout=15)
    assert health.status_code == 503 and health.json()["failed_hop"] == "redis"

    redis_server.port = port  # back on the same address, empty (no persistence)
    redis_server.start()
    eventually_sync(lambda: _submit(gateway).status_code == 202, timeout=30, what="recovery")
    assert httpx.get(gateway.url + "/health", timeout=15).status_code == 200


def test_redis_out_of_memory_is_a_503_and_nothing_is_enqueued(
    gateway: Gateway, redis_server: EmbeddedRedis
) -> None:
    """RELIABILITY.md row 20: maxmemory reached with noeviction."""
    node = redis.Redis(port=redis_server.port)
    try:
        assert _submit(gateway).status_code == 202
        queued = _stream_entries(node)
        node.config_set("maxmemory", 1)  # every write that grows memory is refused now
        refused = _submit(gateway)
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"] == "1"
        assert "out of memory" in refused.json()["detail"]
        assert _stream_entries(node) == queued, "nothing enqueued"
        node.config_set("maxmemory", 0)
        assert _submit(gateway).status_code == 202
    finally:
        node.close()


def _stream_entries(node: redis.Redis) -> int:
    return sum(int(node.xlen(k)) for k in node.scan_iter(_type="stream") if b":{echo:" in k)
