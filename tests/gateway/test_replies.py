"""POST /v1/tasks/{id}/reply and GET /v1/waiting over a real gateway process and a real
worker process: a reply resumes the task once; another tenant's task or an unknown one is
404; a second reply is 409 already_replied (the first answer applied once); an answer that
breaks the schema is 422 naming the field; a task that is not waiting is 409 not_waiting."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from deepagents.gateway.auth import hash_key
from deepagents.transport.keys import Keys
from tests.gateway.conftest import Deployment, make_deployment
from tests.gateway.procs import KEYS, Proc, auth, start_gateway, start_worker
from tests.support.asking import CONFIG
from tests.support.wait import eventually_sync


def _config() -> str:
    keys = "\n".join(
        f"    - {{tenant: {t}, sha256: {hash_key(k)}, name: {t}-test}}" for t, k in KEYS.items()
    )
    return CONFIG + f"gateway:\n  api_keys:\n{keys}\n"


@pytest.fixture(scope="module")
def deployment(redis_url: str) -> Iterator[Deployment]:
    yield from make_deployment(redis_url, _config())


@pytest.fixture(scope="module")
def worker(deployment: Deployment) -> Iterator[Proc]:
    with start_worker(deployment.env, "tests.support.asking:ApprovalAgent") as proc:
        yield proc


@pytest.fixture(scope="module")
def http(deployment: Deployment, worker: Proc) -> Iterator[httpx.Client]:
    with (
        start_gateway(deployment.env) as gw,
        httpx.Client(base_url=gw.url, timeout=30) as client,
    ):
        yield client


@contextlib.contextmanager
def stopped(worker: Proc) -> Iterator[None]:
    """The worker process stopped for the block, started again after it: a task a reply
    queues meanwhile stays queued, taken by nobody."""
    worker.stop()
    try:
        yield
    finally:
        worker.start()


def _ask(http: httpx.Client, runs: Path, tenant: str = "alpha", **payload: Any) -> str:
    body = {"intent": "approve", "payload": {"runs": str(runs), "item": "order 9", **payload}}
    r = http.post("/v1/tasks", json=body, headers=auth(tenant))
    assert r.status_code == 202, r.text
    task_id = str(r.json()["task_id"])

    def waiting() -> dict[str, Any] | None:
        view = http.get(f"/v1/tasks/{task_id}", headers=auth(tenant)).json()
        return view if view["state"] == "waiting" else None

    view = eventually_sync(waiting, timeout=30, what="the task waits for a reply")
    assert view is not None and view["question"]["question"] == "approve order 9?"
    assert view["question"]["answer_schema"]["required"] == ["approved"]
    return task_id


def _reply(http: httpx.Client, task_id: str, answer: Any, tenant: str = "alpha") -> httpx.Response:
    return http.post(f"/v1/tasks/{task_id}/reply", json={"answer": answer}, headers=auth(tenant))


def _state(http: httpx.Client, task_id: str) -> str:
    return str(http.get(f"/v1/tasks/{task_id}", headers=auth()).json()["state"])


def _result(http: httpx.Client, task_id: str) -> dict[str, Any]:
    view = http.get(f"/v1/tasks/{task_id}?wait=20", headers=auth()).json()
    assert view["state"] == "done", view
    return dict(view["result"])


def test_a_reply_resumes_the_task_and_a_second_is_409(
    http: httpx.Client, worker: Proc, tmp_path: Path
) -> None:
    """The second reply comes while the first one's entry is queued and the worker is
    stopped: the reply itself is refused, not a later check of a running or done task."""
    task_id = _ask(http, tmp_path / "runs")
    listed = http.get("/v1/waiting", headers=auth()).json()["tasks"]
    assert [w["task_id"] for w in listed] == [task_id] and listed[0]["age_s"] >= 0
    assert http.get("/v1/waiting", headers=auth("beta")).json()["tasks"] == []
    with stopped(worker):
        first = _reply(http, task_id, {"approved": True, "note": "first"})
        assert first.status_code == 200, first.text
        assert first.json()["state"] == "queued" and first.json()["ask"] == "1"
        second = _reply(http, task_id, {"approved": False, "note": "second"})
        assert second.status_code == 409 and second.json()["code"] == "already_replied"
        assert second.headers["content-type"] == "application/problem+json"
        assert _state(http, task_id) == "queued"
    assert _result(http, task_id)["output"] == {"approved": True, "note": "first"}
    lines = (tmp_path / "runs").read_text().splitlines()
    assert [line for line in lines if "answered" in line] == [f"{task_id} answered True"]


def test_concurrent_replies_apply_one_answer(
    http: httpx.Client, worker: Proc, tmp_path: Path
) -> None:
    """The worker is stopped while the replies land: the seven refused find the task
    queued by the first, not taken back by a worker."""
    task_id = _ask(http, tmp_path / "runs")
    with stopped(worker), ThreadPoolExecutor(8) as pool:
        answers = [{"approved": True, "note": f"n{i}"} for i in range(8)]
        replies = list(pool.map(lambda a: _reply(http, task_id, a), answers))
        assert _state(http, task_id) == "queued"
    codes = [r.status_code for r in replies]
    assert sorted(codes) == [200] + [409] * 7
    assert {r.json()["code"] for r in replies if r.status_code == 409} == {"already_replied"}
    output = _result(http, task_id)["output"]
    lines = (tmp_path / "runs").read_text().splitlines()
    assert len([line for line in lines if "answered" in line]) == 1
    assert output["note"] in {a["note"] for a in answers}


def test_a_tenant_s_listing_is_its_own_oldest_whatever_others_wait(
    http: httpx.Client, tmp_path: Path
) -> None:
    older = [_ask(http, tmp_path / "runs") for _ in range(3)]  # alpha's, asked first
    mine = _ask(http, tmp_path / "runs", tenant="beta")
    listed = http.get("/v1/waiting?limit=1", headers=auth("beta")).json()["tasks"]
    assert [w["task_id"] for w in listed] == [mine]
    listed = http.get("/v1/waiting?limit=2", headers=auth()).json()["tasks"]
    assert [w["task_id"] for w in listed] == older[:2]
    for task_id in older:
        assert _reply(http, task_id, {"approved": True}).status_code == 200
    assert _reply(http, mine, {"approved": True}, tenant="beta").status_code == 200


def _listed(http: httpx.Client, path: str) -> list[list[str]]:
    """Every page of ``GET /v1/waiting`` (beta's), following each ``next``."""
    pages: list[list[str]] = []
    following: str | None = path
    while following is not None:
        r = http.get(following, headers=auth("beta"))
        assert r.status_code == 200, r.text
        pages.append([w["task_id"] for w in r.json()["tasks"]])
        following = r.json()["next"]
    return pages


def test_the_waiting_listing_pages_with_a_cursor_listing_each_question_once(
    http: httpx.Client, tmp_path: Path
) -> None:
    mine = [_ask(http, tmp_path / "runs", tenant="beta") for _ in range(5)]
    oldest = _listed(http, "/v1/waiting?limit=2")
    assert [len(p) for p in oldest] == [2, 2, 1]
    listed = [t for p in oldest for t in p]
    assert listed == mine  # asked one after the other: oldest first is the order asked
    newest = _listed(http, "/v1/waiting?limit=3&order=newest")
    assert [t for p in newest for t in p] == mine[::-1]
    bad = http.get("/v1/waiting?cursor=not-a-cursor", headers=auth("beta"))
    assert bad.status_code == 422 and bad.json()["code"] == "validation_error", bad.text
    for task_id in mine:
        assert _reply(http, task_id, {"approved": True}, tenant="beta").status_code == 200


def test_a_task_an_upstream_service_published_for_a_tenant_is_that_tenant_s(
    http: httpx.Client, deployment: Deployment, tmp_path: Path
) -> None:
    """Submitted straight through the Python API (``deepagents publish --tenant``), not the
    gateway: the tenant lists its question, reads it and answers it; another tenant sees
    none of it."""
    payload = json.dumps({"runs": str(tmp_path / "runs"), "item": "order 9"})
    published = subprocess.run(
        [sys.executable, "-m", "deepagents", "publish", "--intent", "approve",
         "--payload", payload, "--tenant", "beta"],
        env=deployment.env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    task_id = json.loads(published.stdout)["task_id"]

    def listed() -> list[str] | None:
        tasks = http.get("/v1/waiting", headers=auth("beta")).json()["tasks"]
        return [w["task_id"] for w in tasks] or None

    assert eventually_sync(listed, timeout=30, what="beta lists the question") == [task_id]
    assert http.get("/v1/waiting", headers=auth()).json()["tasks"] == []
    assert http.get(f"/v1/tasks/{task_id}", headers=auth()).status_code == 404
    assert _reply(http, task_id, {"approved": True}, tenant="beta").status_code == 200
    view = http.get(f"/v1/tasks/{task_id}?wait=20", headers=auth("beta")).json()
    assert view["state"] == "done", view


def test_another_tenant_s_task_or_an_unknown_one_is_404(http: httpx.Client, tmp_path: Path) -> None:
    task_id = _ask(http, tmp_path / "runs")
    other = _reply(http, task_id, {"approved": True}, tenant="beta")
    assert other.status_code == 404 and other.json()["code"] == "not_found"
    unknown = _reply(http, "no-such-task", {"approved": True})
    assert unknown.status_code == 404 and unknown.json()["code"] == "not_found"
    # Still waiting for its own tenant's answer.
    assert http.get(f"/v1/tasks/{task_id}", headers=auth()).json()["state"] == "waiting"
    assert _reply(http, task_id, {"approved": False}).status_code == 200


def test_an_answer_that_breaks_the_schema_is_422_naming_the_field(
    http: httpx.Client, tmp_path: Path
) -> None:
    task_id = _ask(http, tmp_path / "runs")
    wrong = _reply(http, task_id, {"approved": "maybe"})
    assert wrong.status_code == 422 and wrong.json()["code"] == "invalid_reply"
    assert wrong.json()["errors"][0]["field"] == "answer.approved"
    assert "answer.approved" in wrong.json()["detail"]
    missing = _reply(http, task_id, {"note": "no decision"})
    assert missing.status_code == 422 and missing.json()["errors"][0]["field"] == "answer.approved"
    long = _reply(http, task_id, {"approved": True, "note": "x" * 201})
    assert long.status_code == 422 and long.json()["errors"][0]["field"] == "answer.note"
    no_answer = http.post(f"/v1/tasks/{task_id}/reply", json={}, headers=auth())
    assert no_answer.status_code == 422 and no_answer.json()["code"] == "validation_error"
    bad_json = http.post(
        f"/v1/tasks/{task_id}/reply",
        content=b"{",
        headers={**auth(), "content-type": "application/json"},
    )
    assert bad_json.status_code == 400
    # Nothing was applied: the task still waits, and a good answer goes through.
    assert http.get(f"/v1/tasks/{task_id}", headers=auth()).json()["state"] == "waiting"
    assert _reply(http, task_id, {"approved": True}).status_code == 200


def test_a_task_that_is_not_waiting_is_409(http: httpx.Client, deployment: Deployment) -> None:
    r = http.post("/v1/tasks", json={"intent": "echo", "payload": {}}, headers=auth())
    task_id = r.json()["task_id"]  # no echo worker runs: it stays queued
    refused = _reply(http, task_id, {"approved": True})
    assert refused.status_code == 409 and refused.json()["code"] == "not_waiting"
    assert "queued" in refused.json()["detail"]


def test_an_unanswered_question_is_escalated_by_the_worker_process(
    http: httpx.Client, deployment: Deployment, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    task_id = _ask(http, runs, timeout_s=0.5, on_timeout="escalate")

    key = f"{deployment.prefix}:idem:" + _idem_digest(f"escalation:{task_id}:1", "alpha")

    def escalated() -> bool:
        return bool(deployment.redis.exists(key))

    eventually_sync(escalated, timeout=30, what="the escalation task submitted")

    def waiting_again() -> bool:  # for whoever handles the escalation
        return bool(http.get(f"/v1/tasks/{task_id}", headers=auth()).json()["state"] == "waiting")

    eventually_sync(waiting_again, timeout=30, what="the original waits again")
    assert _reply(http, task_id, {"approved": True, "note": "escalated"}).status_code == 200
    assert _result(http, task_id)["output"] == {"approved": True, "note": "escalated"}


def _idem_digest(key: str, tenant: str) -> str:
    return Keys("x").idempotency(key, tenant).rsplit(":", 1)[-1]
