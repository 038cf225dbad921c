"""The per-tenant token bucket and in-flight cap hold across two gateway processes."""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Iterator

import httpx
import pytest

from tests.gateway.conftest import Deployment, make_deployment
from tests.gateway.procs import Gateway, auth, config_yaml, start_gateway
from tests.support.wait import eventually_sync

# A token per 20 s: in this module's few seconds (or minutes, on a loaded machine) the
# bucket refills by one token at most, so one bucket and two are told apart by counts.
RATE, BURST = 0.05, 10
TENANTS = f"""  tenants:
    alpha: {{rate_per_s: {RATE}, burst: {BURST}, max_in_flight: 2}}
"""


@pytest.fixture(scope="module")
def deployment(redis_url: str) -> Iterator[Deployment]:
    yield from make_deployment(redis_url, config_yaml(tenants=TENANTS))


@pytest.fixture(scope="module")
def gateways(deployment: Deployment) -> Iterator[list[Gateway]]:
    with start_gateway(deployment.env) as first, start_gateway(deployment.env) as second:
        yield [first, second]


def test_bucket_is_shared_by_the_fleet(gateways: list[Gateway]) -> None:
    ok = limited = 0
    with httpx.Client(timeout=10) as http:
        for i in range(40):
            r = http.get(gateways[i % 2].url + "/v1/agents", headers=auth("alpha"))
            if r.status_code == 200:
                ok += 1
            else:
                assert r.status_code == 429, r.text
                assert r.json()["code"] == "rate_limited"
                assert int(r.headers["retry-after"]) >= 1
                limited += 1
        # One bucket for both processes: the burst, and a refilled token or two at most;
        # a bucket per process would let both bursts through.
        assert BURST <= ok < 2 * BURST and limited == 40 - ok, (ok, limited)
        # Another tenant is not affected.
        assert http.get(gateways[0].url + "/v1/agents", headers=auth("beta")).status_code == 200


def test_in_flight_cap_is_shared_by_the_fleet(
    gateways: list[Gateway], deployment: Deployment
) -> None:
    keys = f"{deployment.prefix}:gw:{{tenant:alpha}}"
    deployment.redis.delete(f"{keys}:bucket")  # refill after the test above drained it
    with httpx.Client(timeout=10) as http:
        own = http.post(
            gateways[0].url + "/v1/tasks", json={"intent": "echo"}, headers=auth("alpha")
        )
        assert own.status_code == 202, own.text
        href = own.json()["href"]
    # Two long-polls, one per process, hold alpha's two slots (no worker runs the task).
    with cf.ThreadPoolExecutor(2) as pool, httpx.Client(timeout=10) as http:
        polls = [
            pool.submit(httpx.get, gw.url + href + "?wait=3", headers=auth("alpha"), timeout=10)
            for gw in gateways
        ]
        eventually_sync(
            lambda: deployment.redis.zcard(f"{keys}:inflight") == 2,
            timeout=5,
            interval=0.02,
            what="two long-polls in flight",
        )
        r = http.get(gateways[1].url + "/v1/agents", headers=auth("alpha"))
        assert r.status_code == 429 and r.json()["code"] == "too_many_in_flight", r.text
        assert int(r.headers["retry-after"]) >= 1
        assert [p.result().status_code for p in polls] == [200, 200]
    assert deployment.redis.zcard(f"{keys}:inflight") == 0
