"""Submit, read, long-poll, cancel, batch, agents, metrics; tenancy (404 across tenants)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from deepagents.gateway.routes_tasks import WARNING_HEADER as WARNING
from tests.gateway.conftest import Deployment
from tests.gateway.procs import Gateway, Proc, auth, start_gateway, start_worker
from tests.support.wait import eventually_sync


@pytest.fixture(scope="module")
def http(gateway: Gateway) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        yield client


def submit(http: httpx.Client, tenant: str = "alpha", **body: object) -> dict[str, object]:
    r = http.post("/v1/tasks", json={"intent": "echo", **body}, headers=auth(tenant))
    assert r.status_code == 202, r.text
    return dict(r.json())


def test_submit_is_queued_until_a_worker_runs_it(
    http: httpx.Client, deployment: Deployment
) -> None:
    before = deployment.queued_entries()
    accepted = submit(http, payload={"n": 1})
    assert accepted["agent"] == "echo" and accepted["tier"] == "p2" and not accepted["duplicate"]
    assert deployment.queued_entries() == before + 1
    r = http.get(str(accepted["href"]), headers=auth())
    assert r.status_code == 200 and r.json()["state"] == "queued" and r.json()["result"] is None
    # A short long-poll on a task nobody runs returns its current state after the wait.
    start = time.monotonic()
    r = http.get(str(accepted["href"]) + "?wait=0.5", headers=auth())
    assert r.json()["state"] == "queued" and 0.4 < time.monotonic() - start < 5


def test_urgent_strategy_routes_to_p0(http: httpx.Client) -> None:
    assert submit(http, payload={"urgent": True})["tier"] == "p0"
    assert submit(http, priority=1)["tier"] == "p1"


def test_another_tenants_task_is_not_found(http: httpx.Client, deployment: Deployment) -> None:
    accepted = submit(http, tenant="alpha")
    task = str(accepted["href"])
    for path, method in ((task, "GET"), (task + "?wait=1", "GET"), (task + "/cancel", "POST")):
        r = http.request(method, path, headers=auth("beta"))
        assert r.status_code == 404, r.text
        assert r.json()["code"] == "not_found"
    # The same answer as for an id that never existed: nothing tells the two apart.
    missing = http.get("/v1/tasks/0190f0f0-0000-7000-8000-000000000000", headers=auth("beta"))
    assert missing.status_code == 404
    assert r.json()["title"] == missing.json()["title"]
    assert http.get(task, headers=auth("alpha")).status_code == 200


def test_cancel_a_queued_task(http: httpx.Client) -> None:
    accepted = submit(http)
    r = http.post(f"{accepted['href']}/cancel", headers=auth())
    assert r.status_code == 200 and r.json() == {
        "task_id": accepted["task_id"],
        "state": "done",
        "cancelled": True,
    }
    view = http.get(str(accepted["href"]), headers=auth()).json()
    assert view["state"] == "done" and view["result"]["error"]["code"] == "cancelled"
    again = http.post(f"{accepted['href']}/cancel", headers=auth())
    assert again.status_code == 409 and again.json()["code"] == "too_late"


def test_a_task_for_later_is_scheduled_until_due_and_can_be_cancelled(
    http: httpx.Client, deployment: Deployment
) -> None:
    before = deployment.queued_entries()
    accepted = submit(http, delay_s=3600)
    view = http.get(str(accepted["href"]), headers=auth()).json()
    assert view["state"] == "scheduled" and view["due_at"] is not None
    assert deployment.queued_entries() == before  # in the delayed set, not in a tier yet
    r = http.post(f"{accepted['href']}/cancel", headers=auth())
    assert r.status_code == 200 and r.json()["cancelled"] is True
    view = http.get(str(accepted["href"]), headers=auth()).json()
    assert view["state"] == "done" and view["result"]["error"]["code"] == "cancelled"
    when = (datetime.now(UTC) + timedelta(hours=2)).isoformat()
    at = submit(http, not_before=when, idempotency_key="later-1")
    again = submit(http, not_before=when, idempotency_key="later-1")
    assert again["task_id"] == at["task_id"] and again["duplicate"] is True


def test_a_fairness_key_is_scoped_by_tenant(http: httpx.Client, deployment: Deployment) -> None:
    """A tenant's fairness keys live under its name: no tenant can join another's queue."""
    accepted = submit(http, tenant="beta", fairness_key="batch", fairness_weight=2)
    found = []
    for key in deployment.redis.scan_iter(match=f"{deployment.prefix}:*:p2", _type="stream"):
        entries: Any = deployment.redis.xrange(key)
        for _, fields in entries:
            task = json.loads(fields[b"task"])
            if task["task_id"] == accepted["task_id"]:
                found.append(task)
    assert [(t["fairness_key"], t["fairness_weight"]) for t in found] == [("beta/batch", 2.0)]


def test_idempotency_key_is_scoped_by_tenant(http: httpx.Client, deployment: Deployment) -> None:
    before = deployment.queued_entries()
    first = submit(http, tenant="alpha", idempotency_key="order-42")
    again = submit(http, tenant="alpha", idempotency_key="order-42")
    other = submit(http, tenant="beta", idempotency_key="order-42")
    assert again["task_id"] == first["task_id"] and again["duplicate"]
    assert other["task_id"] != first["task_id"] and not other["duplicate"]
    assert deployment.queued_entries() == before + 2
    assert http.get(str(other["href"]), headers=auth("alpha")).status_code == 404


def test_idempotency_key_reused_with_another_body_is_a_409(
    http: httpx.Client, deployment: Deployment
) -> None:
    first = submit(http, idempotency_key="invoice-9", payload={"amount": 10})
    before = deployment.queued_entries()
    body = {"intent": "echo", "idempotency_key": "invoice-9", "payload": {"amount": 99}}
    r = http.post("/v1/tasks", json=body, headers=auth())
    assert r.status_code == 409, r.text
    problem = r.json()
    assert problem["code"] == "idempotency_conflict"
    assert problem["type"].endswith(":idempotency_conflict")
    assert first["task_id"] in problem["detail"] and "new key" in problem["detail"]
    assert deployment.queued_entries() == before
    again = submit(http, idempotency_key="invoice-9", payload={"amount": 10})
    assert again["task_id"] == first["task_id"] and again["duplicate"]


def test_long_poll_through_another_gateway_process(
    http: httpx.Client, deployment: Deployment
) -> None:
    """Submitted through one gateway process, awaited through another: the waiting process
    is not on the task's reply channel and must see the result by reading the task hash."""
    order = {"symbol": "IF", "side": "buy", "quantity": 2, "price": 3800}
    accepted = submit(http, intent="risk_check", payload={**order, "available_funds": 10**6})
    with (
        start_gateway(deployment.env) as other,
        httpx.Client(base_url=other.url, timeout=30) as client,
        ThreadPoolExecutor(1) as pool,
    ):
        # No risk worker runs yet: the long-poll is waiting when the worker starts.
        pending = pool.submit(
            client.get, f"/v1/tasks/{accepted['task_id']}?wait=20", headers=auth()
        )
        with start_worker(deployment.env, "agents.risk:RiskAgent"):
            r = pending.result(timeout=30)
    assert r.status_code == 200, r.text
    view = r.json()
    assert view["state"] == "done" and view["result"]["status"] == "success", view


def test_batch_then_results_with_a_worker(http: httpx.Client, echo_worker: Proc) -> None:
    body = {"tasks": [{"intent": "echo", "payload": {"i": i}} for i in range(20)]}
    r = http.post("/v1/tasks/batch", json=body, headers=auth())
    assert r.status_code == 202, r.text
    tasks = r.json()["tasks"]
    assert len({t["task_id"] for t in tasks}) == 20
    for i, t in enumerate(tasks):
        view = http.get(f"{t['href']}?wait=10", headers=auth()).json()
        assert view["state"] == "done" and view["result"]["output"] == {"i": i}
    r = http.post(f"{tasks[0]['href']}/cancel", headers=auth())
    assert r.status_code == 409 and "done" in r.json()["detail"]


def test_agents_lists_live_workers(http: httpx.Client, echo_worker: Proc) -> None:
    r = http.get("/v1/agents", headers=auth())
    assert r.status_code == 200
    echo = next(a for a in r.json()["agents"] if a["name"] == "echo")
    assert echo["version"] == "1.0.0" and echo["intents"] == ["echo"]
    assert echo["healthy"] and echo["instances"] >= 1


def test_metrics_count_requests(http: httpx.Client) -> None:
    text = http.get("/metrics").text
    assert 'deepagents_gateway_requests_total{method="POST",route="/v1/tasks",status="202"}' in text
    assert "deepagents_gateway_request_seconds_bucket" in text


def test_a_task_no_live_worker_serves_is_accepted_with_a_warning(
    http: httpx.Client, echo_worker: Proc
) -> None:
    order = {"symbol": "IF", "side": "buy", "quantity": 1, "price": "4000.5",
             "available_funds": "1000000.00"}  # fmt: skip

    def post(intent: str, **body: object) -> httpx.Response:
        r = http.post("/v1/tasks", json={"intent": intent, **body}, headers=auth())
        assert r.status_code == 202, r.text
        return r

    # No risk worker runs (one that ran in an earlier test has stopped): said in a header
    # and in the body, and the task is queued all the same.
    warned = eventually_sync(
        lambda: (r := post("risk_check", payload=order)).headers.get(WARNING) and r,
        timeout=30,
        what="a warning",
    )
    assert isinstance(warned, httpx.Response)
    text = "no live worker serves agent 'risk': its tasks wait until one starts"
    assert warned.headers[WARNING] == text and warned.json()["warning"] == text
    batch = http.post("/v1/tasks/batch", json={"tasks": [{"intent": "risk_check",
                      "payload": order}]}, headers=auth())  # fmt: skip
    assert batch.headers[WARNING] == text and batch.json()["tasks"][0]["warning"] == text
    assert http.get(warned.json()["href"], headers=auth()).json()["state"] == "queued"
    # An echo worker runs: nothing to say.
    quiet = eventually_sync(lambda: WARNING not in (r := post("echo")).headers and r, timeout=30)
    assert isinstance(quiet, httpx.Response) and quiet.json()["warning"] is None
