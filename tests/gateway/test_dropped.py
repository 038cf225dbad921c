"""Issue 22: a submitter waiting through the gateway (``POST /v1/tasks?wait=``) on a task its
tier dropped (on_overdue: drop) gets 503 with Retry-After, as a problem document; the
task's record still reads failed/dropped. Real gateway and worker processes."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from deepagents.gateway.auth import hash_key
from tests.gateway.conftest import Deployment, make_deployment
from tests.gateway.procs import KEYS, Gateway, Proc, auth, start_worker

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


def test_a_dropped_task_answers_a_waiting_submitter_503_with_retry_after(
    http: httpx.Client,
) -> None:
    # Once the worker runs: a task that finishes proves it reads (and warms the pool).
    warm = http.post("/v1/tasks?wait=30", json={"intent": "nap", "payload": {}}, headers=auth())
    assert warm.status_code == 200, warm.text
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
