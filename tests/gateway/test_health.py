"""/health: liveness; /health?full=true: a probe task end to end, naming the failed hop."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.gateway.conftest import Deployment, make_deployment
from tests.gateway.procs import Gateway, config_yaml, start_gateway, start_worker
from tests.support.wait import eventually_sync

PROBE = "deepagents.gateway.probe:ProbeAgent"


@pytest.fixture(scope="module")
def deployment(redis_url: str) -> Iterator[Deployment]:
    yield from make_deployment(redis_url, config_yaml(probe_timeout_s=1.5))


@pytest.fixture(scope="module")
def gateway(deployment: Deployment) -> Iterator[Gateway]:
    with start_gateway(deployment.env) as gw:
        yield gw


def full(gw: Gateway) -> httpx.Response:
    return httpx.get(gw.url + "/health?full=true", timeout=15)


def full_answering(gw: Gateway, status: int, what: str) -> httpx.Response:
    def answered() -> httpx.Response | None:  # the answer once it has that status
        r = full(gw)
        return r if r.status_code == status else None

    found = eventually_sync(answered, timeout=30, interval=0.5, what=what)
    assert found is not None
    return found


def test_liveness(gateway: Gateway) -> None:
    r = httpx.get(gateway.url + "/health")
    assert r.status_code == 200 and r.json()["status"] == "ok" and r.json()["redis_ms"] >= 0


def test_full_check_fails_without_workers_and_recovers(
    gateway: Gateway, deployment: Deployment
) -> None:
    r = full(gateway)
    assert r.status_code == 503, r.text
    body = r.json()
    assert body["status"] == "fail" and body["failed_hop"] == "queue"
    assert "ProbeAgent" in body["hops"][-1]["detail"]
    assert r.headers["retry-after"] == "1"

    with start_worker(deployment.env, PROBE):
        ok = full_answering(gateway, 200, "full health green with a probe worker")
        hops = {h["name"]: h for h in ok.json()["hops"]}
        assert list(hops) == ["redis", "enqueue", "queue", "worker", "reply"]
        assert all(h["ok"] and h["latency_ms"] is not None for h in hops.values())

    # The last report is answered again for probe_cache_s (5 s): then a new probe fails.
    r = full_answering(gateway, 503, "full health red once the probe worker is gone")
    assert r.json()["failed_hop"] == "queue"
    # Probes that nobody took were cancelled, not left to pile up.
    assert deployment.queued_entries() <= 3
