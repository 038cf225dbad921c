"""/health: liveness; /health?full=true: a probe task end to end, naming the failed hop."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

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


def green(gw: Gateway) -> httpx.Response | None:
    """The full check's answer once it is 200, else None."""
    r = full(gw)
    return r if r.status_code == 200 else None


def full(gw: Gateway) -> httpx.Response:
    return httpx.get(gw.url + "/health?full=true", timeout=15)


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
        ok = eventually_sync(
            partial(green, gateway),
            timeout=30,
            interval=0.2,
            what="full health green with a probe worker",
        )
        assert ok is not None  # eventually_sync returns only a truthy value
        hops = {h["name"]: h for h in ok.json()["hops"]}
        assert list(hops) == ["redis", "enqueue", "queue", "worker", "reply"]
        assert all(h["ok"] and h["latency_ms"] is not None for h in hops.values())

    r = full(gateway)
    assert r.status_code == 503 and r.json()["failed_hop"] == "queue"
    # Probes that nobody took were cancelled, not left to pile up.
    assert deployment.queued_entries() <= 3
