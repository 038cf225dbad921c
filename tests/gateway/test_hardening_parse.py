"""Issue 16, finding 3: one tenant's large bodies cannot stall another tenant.

A body is parsed (Python hooks, on the order of 100 ms per MiB of small values) before the
token bucket sees it, and one that then fails validation spent no token: 80 invalid 1 MiB
bodies from one tenant, 8 at a time, moved another tenant's median from milliseconds to
seconds. Now each tenant has a parse budget in bytes, charged before the parse, and a
large body is parsed off the event loop.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.gateway.alpha_flood import INVALID_MIB, MIB
from tests.gateway.conftest import Deployment, make_deployment
from tests.gateway.procs import Gateway, auth, config_yaml, start_gateway
from tests.gateway.tenants import b_during_attack, tenant_b


@pytest.fixture(scope="module")
def deployment(redis_url: str) -> Iterator[Deployment]:
    yield from make_deployment(redis_url, config_yaml())


@pytest.fixture(scope="module")
def gateway(deployment: Deployment) -> Iterator[Gateway]:
    with start_gateway(deployment.env) as gw:
        yield gw


def _invalid(http: httpx.Client) -> int:
    r = http.post("/v1/tasks", content=INVALID_MIB, headers={"Content-Type": "application/json"})
    return r.status_code


def test_large_invalid_bodies_cost_their_sender_not_other_tenants(gateway: Gateway) -> None:
    """Alpha sends invalid 1 MiB bodies, 8 at a time and without pause, for as long as
    beta submits: beta's answers stay 202, and alpha's bodies past its parse budget (1 s,
    then 0.25 s/s, by default) are refused unparsed. How much slower beta is meanwhile is
    printed, and measured in docs/benchmarks.md ("Gateway: one tenant against another"),
    not asserted: it was 7-12x here with the budget and 7-8x with it removed (receiving
    8 x 1 MiB at once costs the 2-core machine that much either way), so a bound on it
    failed now and then without telling the two apart."""
    assert len(INVALID_MIB) <= MIB
    solo = tenant_b(gateway, count=40)
    start = time.monotonic()
    under, a_statuses = b_during_attack(gateway, connections=8, count=40)
    took = time.monotonic() - start
    assert set(solo.statuses) == {202} and set(under.statuses) == {202}, under.statuses
    ratio = under.p50_ms / solo.p50_ms
    print(
        f"beta p50 solo {solo.p50_ms:.2f} ms, under alpha's 1 MiB bodies {under.p50_ms:.2f} ms "
        f"({ratio:.2f}x); alpha {dict(a_statuses)} in {took:.1f} s; "
        f"beta {len(under.latencies)} requests"
    )
    assert set(a_statuses) <= {0, 422, 429} and a_statuses[429] > 0, a_statuses


def test_a_large_body_is_parsed_off_the_event_loop(gateway: Gateway) -> None:
    """While one 1 MiB body is parsed (on the order of a second here), the process goes on
    answering ``/health``: on the event loop, nothing would be answered until it is done.
    Beta sends it (alpha's parse budget is spent by the test above; this leaves beta's in
    debt, so it comes last)."""
    with (
        cf.ThreadPoolExecutor(1) as pool,
        httpx.Client(base_url=gateway.url) as http,
        httpx.Client(base_url=gateway.url, headers=auth("beta"), timeout=60) as beta,
    ):
        big = pool.submit(_invalid, beta)
        answered_meanwhile = 0
        while not big.done():
            assert http.get("/health", timeout=60).status_code == 200
            answered_meanwhile += not big.done()
        assert big.result() == 422
    print(f"/health answered {answered_meanwhile} times during one 1 MiB parse")
    assert answered_meanwhile >= 5, answered_meanwhile
