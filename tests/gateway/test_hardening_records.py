"""Issue 16, finding 2: a failed submit leaves no owner or location record behind.

Both records are written with admission, before the enqueue. Every way a submit can fail
after that is driven here against a real gateway, and then the keys are scanned: the only
records left are those of tasks the gateway accepted.
"""

from __future__ import annotations

import concurrent.futures as cf
import re
from collections.abc import Iterator

import httpx
import pytest

from tests.gateway.conftest import Deployment, make_deployment
from tests.gateway.procs import Gateway, auth, config_yaml, start_gateway
from tests.support.wait import eventually_sync

TENANTS = """  tenants:
    alpha: {rate_per_s: 0.001, burst: 3, max_in_flight: 100}
    beta: {rate_per_s: 1000, burst: 1000, max_in_flight: 1}
"""
BACKLOG = 2  # per stream (two shards): the third to sixth echo task finds it full
PAYLOAD_LIMIT = 2048
ORDER = {"symbol": "IF", "side": "buy", "quantity": 2, "price": 3800, "available_funds": 1_000_000}
RISK = {"intent": "risk_check", "payload": ORDER}


@pytest.fixture(scope="module")
def deployment(redis_url: str) -> Iterator[Deployment]:
    text = config_yaml(tenants=TENANTS).replace(
        'echo: {class: "agents.echo:EchoAgent"}',
        f'echo: {{class: "agents.echo:EchoAgent", settings: {{max_backlog: {BACKLOG}}}}}',
    )
    yield from make_deployment(redis_url, text)


@pytest.fixture(scope="module")
def gateway(deployment: Deployment) -> Iterator[Gateway]:
    env = {**deployment.env, "DEEPAGENTS_MAX_PAYLOAD_BYTES": str(PAYLOAD_LIMIT)}
    with start_gateway(env) as gw:
        yield gw


def _records(deployment: Deployment) -> tuple[set[str], set[str]]:
    """Task ids with an owner record, and with a location record."""

    def ids(pattern: str) -> set[str]:
        keys = deployment.redis.scan_iter(match=f"{deployment.prefix}:{pattern}*", count=1000)
        return {k.decode().rsplit(":", 1)[-1] for k in keys}

    return ids("gw:owner:"), ids("loc:")


def test_no_record_outlives_a_failed_submit(gateway: Gateway, deployment: Deployment) -> None:
    accepted: set[str] = set()
    refused: dict[str, int] = {}

    with httpx.Client(base_url=gateway.url, timeout=30) as http:

        def submit(tenant: str, body: object, path: str = "/v1/tasks") -> httpx.Response:
            r = http.post(path, json=body, headers=auth(tenant))
            if r.status_code == 202:
                tasks = r.json().get("tasks", [r.json()])
                accepted.update(t["task_id"] for t in tasks)
            else:
                refused[r.json()["code"]] = refused.get(r.json()["code"], 0) + 1
            return r

        # An integer orjson cannot encode (a 500 that left both records, before the fix).
        raw = http.post(
            "/v1/tasks",
            content=b'{"intent":"echo","payload":{"n":99999999999999999999}}',
            headers={**auth("beta"), "Content-Type": "application/json"},
        )
        assert raw.status_code not in (202, 200), raw.text
        # Bigger encoded than DEEPAGENTS_MAX_PAYLOAD_BYTES (the orchestrator refuses).
        submit("beta", {"intent": "echo", "payload": {"x": "y" * PAYLOAD_LIMIT}})
        # The same idempotency key for another task.
        submit("beta", {"intent": "echo", "idempotency_key": "k1", "payload": {"v": 1}})
        submit("beta", {"intent": "echo", "idempotency_key": "k1", "payload": {"v": 2}})
        # The streams' backlog: singles, then a batch refused part-way.
        while submit("beta", {"intent": "echo", "payload": {}}).status_code == 202:
            pass
        batch = submit("beta", {"tasks": [{"intent": "echo"} for _ in range(4)]}, "/v1/tasks/batch")
        accepted.update(re.findall(r"[0-9a-f-]{36}", batch.json()["detail"]))
        # Alpha's bucket: burst 3, then refused.
        # A payload the agent's schema refuses.
        submit("alpha", {"intent": "risk_check", "payload": {}})
        while submit("alpha", RISK).status_code == 202:
            pass
        # Beta's in-flight cap (1): a long-poll holds the slot while another submit comes.
        with cf.ThreadPoolExecutor(1) as pool, httpx.Client(base_url=gateway.url) as other:
            holder = pool.submit(
                other.post, "/v1/tasks?wait=6", json=RISK, headers=auth("beta"), timeout=30
            )
            inflight = f"{deployment.prefix}:gw:{{tenant:beta}}:inflight"
            eventually_sync(
                lambda: deployment.redis.zcard(inflight) == 1,
                timeout=10,
                what="the long-poll holding beta's one slot",
            )
            assert submit("beta", RISK).status_code == 429
            held = holder.result()
        assert held.status_code == 202, held.text
        accepted.add(held.json()["task_id"])
        # Admission itself fails (a bucket key of the wrong type: the script errs) after
        # the records rode in its round trip.
        bucket = f"{deployment.prefix}:gw:{{tenant:alpha}}:bucket"
        deployment.redis.delete(bucket)
        deployment.redis.set(bucket, "not a hash")
        assert http.post("/v1/tasks", json=RISK, headers=auth("alpha")).status_code == 500
        deployment.redis.delete(bucket)

    assert {
        "payload_too_large",
        "invalid_payload",
        "idempotency_conflict",
        "overloaded",
        "rate_limited",
        "too_many_in_flight",
    } <= set(refused), refused
    owners, locations = _records(deployment)
    assert owners == accepted, f"{len(owners - accepted)} orphan owner records"
    assert locations == accepted, f"{len(locations - accepted)} orphan location records"
