"""deepagents.http_client against a real gateway: results, problems, and 429 retries that
honour Retry-After (a tenant limited to 1 task/s, burst 1)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from deepagents.http_client import AsyncGatewayClient, GatewayClient, GatewayError, RetryPolicy
from tests.gateway.conftest import Deployment, make_deployment
from tests.gateway.procs import KEYS, Gateway, Proc, config_yaml, start_gateway

TENANTS = "  tenants:\n    beta: {rate_per_s: 1, burst: 1, max_in_flight: 10}\n"


@pytest.fixture(scope="module")
def deployment(redis_url: str) -> Iterator[Deployment]:
    yield from make_deployment(redis_url, config_yaml(tenants=TENANTS))


@pytest.fixture(scope="module")
def gateway(deployment: Deployment) -> Iterator[Gateway]:
    with start_gateway(deployment.env) as gw:
        yield gw


def test_sync_client_round_trip(gateway: Gateway, echo_worker: Proc) -> None:
    with GatewayClient(gateway.url, KEYS["alpha"]) as gw:
        done = gw.submit("echo", {"x": 1}, wait=10)
        assert done["state"] == "done" and done["result"]["output"] == {"x": 1}
        accepted = gw.submit_batch([{"intent": "echo", "payload": {"i": 1}}])[0]
        assert gw.get(accepted["task_id"], wait=10)["result"]["output"] == {"i": 1}
        assert any(a["name"] == "echo" for a in gw.agents())
        with pytest.raises(GatewayError) as err:
            gw.submit("no.such.intent")
        assert err.value.status == 422 and err.value.code == "unknown_intent"


def test_client_waits_out_429(gateway: Gateway) -> None:
    with GatewayClient(gateway.url, KEYS["beta"], retry=RetryPolicy(attempts=5)) as gw:
        start = time.monotonic()
        for _ in range(3):
            gw.submit("echo", {})  # burst 1 at 1/s: the 2nd and 3rd wait for Retry-After
        assert time.monotonic() - start >= 1.5
    with GatewayClient(gateway.url, KEYS["beta"], retry=RetryPolicy(attempts=1)) as gw:
        with pytest.raises(GatewayError) as err:
            for _ in range(3):
                gw.submit("echo", {})
        assert err.value.status == 429 and err.value.code == "rate_limited"


async def test_async_client(gateway: Gateway, echo_worker: Proc) -> None:
    async with AsyncGatewayClient(gateway.url, KEYS["alpha"]) as gw:
        done = await gw.submit("echo", {"y": 2}, wait=10)
        assert done["result"]["output"] == {"y": 2}
        with pytest.raises(GatewayError) as err:
            await gw.get("0190f0f0-0000-7000-8000-000000000000")
        assert err.value.status == 404
