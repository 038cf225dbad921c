"""The gateway on Redis Cluster (``cluster_url``: a redis-server in cluster mode, which
refuses any command whose keys span slots): admission, submit-and-wait, batches, reads,
cancel and health, with ``DEEPAGENTS_REDIS_CLUSTER=true``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from redis.cluster import RedisCluster

from tests.gateway.procs import (
    auth,
    config_yaml,
    env_for,
    start_gateway,
    start_worker,
    write_config,
)


@pytest.fixture(scope="module")
def http(cluster_url: str) -> Iterator[httpx.Client]:
    prefix = f"g{uuid.uuid4().hex[:10]}"
    config = write_config(config_yaml())
    env = {**env_for(cluster_url, prefix, config), "DEEPAGENTS_REDIS_CLUSTER": "true"}
    keys = RedisCluster.from_url(cluster_url)
    try:
        with (
            start_gateway(env) as gw,
            start_worker(env, "agents.echo:EchoAgent"),
            httpx.Client(base_url=gw.url, timeout=30) as client,
        ):
            yield client
    finally:
        for key in keys.scan_iter(match=f"{prefix}:*", count=1000):
            keys.delete(key)  # one by one: a DEL of several keys may span slots
        keys.close()
        config.unlink(missing_ok=True)


def test_concurrent_submit_and_wait(http: httpx.Client) -> None:
    def one(i: int) -> httpx.Response:
        return http.post(
            "/v1/tasks?wait=20", json={"intent": "echo", "payload": {"i": i}}, headers=auth()
        )

    with ThreadPoolExecutor(16) as pool:
        responses = list(pool.map(one, range(64)))
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses[:3]]
    assert sorted(r.json()["result"]["output"]["i"] for r in responses) == list(range(64))


def test_batch_read_and_cancel(http: httpx.Client) -> None:
    body = {"tasks": [{"intent": "echo", "payload": {"i": i}} for i in range(20)]}
    r = http.post("/v1/tasks/batch", json=body, headers=auth())
    assert r.status_code == 202, r.text
    tasks = r.json()["tasks"]
    for i, t in enumerate(tasks):
        view = http.get(f"{t['href']}?wait=10", headers=auth()).json()
        assert view["state"] == "done" and view["result"]["output"] == {"i": i}
    r = http.post(f"{tasks[0]['href']}/cancel", headers=auth())
    assert r.status_code == 409 and "done" in r.json()["detail"]


def test_health_and_agents(http: httpx.Client) -> None:
    assert http.get("/health").status_code == 200
    r = http.get("/v1/agents", headers=auth())
    assert r.status_code == 200, r.text
    assert any(a["name"] == "echo" and a["instances"] >= 1 for a in r.json()["agents"])
