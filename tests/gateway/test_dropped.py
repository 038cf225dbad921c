"""Issue 22: a submitter waiting through the gateway (``POST /v1/tasks?wait=``) on a task its
tier dropped (on_overdue: drop) gets 503 with Retry-After, as a problem document; the
task's record still reads failed/dropped. Real gateway and worker processes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from deepagents.errors import ErrorCode
from deepagents.gateway.auth import hash_key
from deepagents.http_client import GatewayClient, GatewayError, RetryPolicy
from tests.gateway.conftest import Deployment, make_deployment
from tests.gateway.procs import KEYS, Gateway, Proc, auth, start_worker
from tests.support.wait import eventually_sync

# A pool of one on p2: a task that sleeps past max_wait_ms makes the next one overdue.
CONFIG = f"""
tiers:
  p0: {{concurrency: 5, max_wait_ms: 60000}}
  p2: {{concurrency: 1, max_wait_ms: 1500, on_overdue: drop}}
default_tier: p2
defaults: {{shards: 1, visibility_timeout_ms: 10000, block_ms: 100, grace_period_s: 1}}
agents:
  nap: {{class: "tests.e2e.overdue_agents:NapAgent"}}
gateway:
  api_keys:
    - {{tenant: alpha, sha256: {hash_key(KEYS["alpha"])}, name: alpha-test}}
"""


@pytest.fixture(scope="module")
def deployment(redis_url: str) -> Iterator[Deployment]:
    yield from make_deployment(redis_url, CONFIG)


@pytest.fixture(scope="module")
def nap_worker(deployment: Deployment) -> Iterator[Proc]:
    with start_worker(deployment.env, "tests.e2e.overdue_agents:NapAgent") as proc:
        yield proc


@pytest.fixture(scope="module")
def http(gateway: Gateway, nap_worker: Proc) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=60) as client:
        yield client


def _warm(http: httpx.Client) -> None:
    """Until a task finishes: the worker reads (one submitted while it was still starting
    may have waited past the max wait, and been dropped)."""

    def finished() -> bool:
        body = {"intent": "nap", "payload": {}}
        return http.post("/v1/tasks?wait=30", json=body, headers=auth()).status_code == 200

    eventually_sync(finished, timeout=60, what="a task run by the worker")


def test_a_dropped_task_answers_a_waiting_submitter_503_with_retry_after(
    http: httpx.Client,
) -> None:
    _warm(http)
    napping = http.post(
        "/v1/tasks", json={"intent": "nap", "payload": {"sleep": 4}}, headers=auth()
    )
    assert napping.status_code == 202, napping.text
    late = http.post("/v1/tasks?wait=30", json={"intent": "nap", "payload": {}}, headers=auth())
    assert late.status_code == 503, late.text
    assert late.headers["content-type"] == "application/problem+json"
    assert late.headers["retry-after"] == "2"  # the tier's max wait, 1.5 s, rounded up
    problem = late.json()
    assert problem["code"] == "dropped" and problem["status"] == 503
    assert problem["retry_after_s"] == 1.5
    assert "in p2" in problem["detail"]
    # The task itself is done, failed with dropped, where Location points.
    view = http.get(late.headers["location"], headers=auth()).json()
    assert view["state"] == "done"
    assert view["result"]["status"] == "failed"
    assert view["result"]["error"]["code"] == "dropped"
    # The napping task ran to its end: only the one behind it was dropped.
    first = http.get(f"/v1/tasks/{napping.json()['task_id']}?wait=30", headers=auth()).json()
    assert first["result"]["status"] == "success"


class Counting(httpx.HTTPTransport):
    """A real transport that counts the requests sent through it."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        return super().handle_request(request)


def _nap(http: httpx.Client) -> None:
    """Occupy p2's only slot for 4 s: the next task waits past its 1.5 s."""
    napping = http.post(
        "/v1/tasks", json={"intent": "nap", "payload": {"sleep": 4}}, headers=auth()
    )
    assert napping.status_code == 202, napping.text


def _client(gateway: Gateway, transport: Counting) -> GatewayClient:
    quick = RetryPolicy(attempts=3, max_delay_s=0.2)  # Retry-After says 2 s; capped here
    return GatewayClient(gateway.url, KEYS["alpha"], retry=quick, transport=transport)


def test_the_client_submits_a_dropped_task_again_after_retry_after(
    http: httpx.Client, gateway: Gateway
) -> None:
    _warm(http)
    _nap(http)
    transport = Counting()
    with _client(gateway, transport) as gw:
        view = gw.submit("nap", {}, wait=30)
    # The first submit was dropped (503); the second, a new task, found the pool free.
    assert transport.sent == 2
    assert view["result"]["status"] == "success"


def test_with_an_idempotency_key_the_client_raises_dropped_at_once(
    http: httpx.Client, gateway: Gateway
) -> None:
    _warm(http)
    _nap(http)
    transport = Counting()
    with _client(gateway, transport) as gw, pytest.raises(GatewayError) as raised:
        gw.submit("nap", {}, wait=30, idempotency_key=f"k-{uuid.uuid4().hex}")
    # A repeat would find the same, dropped task: not sent.
    assert transport.sent == 1
    assert raised.value.status == 503 and raised.value.code is ErrorCode.DROPPED
