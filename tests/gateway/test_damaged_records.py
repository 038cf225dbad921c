"""Issue 39, finding 7: reads survive damaged state.

Over a real gateway process, a real worker and Redis, records are damaged in place: a
task's result that is not JSON, a location record that is not ``agent|shard|tier``, a
question whose answer schema is not an object, a member of a waiting index that is not
UTF-8. Each read answers a problem document (``410 decode_error``: retrying will not mend
it) and counts the damage in a metric, with no traceback in the gateway's log; the CLI
prints its listing on one line, the damaged member left out and counted.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from deepagents.gateway.auth import hash_key
from deepagents.transport.keys import Keys
from tests.gateway.conftest import Deployment, make_deployment
from tests.gateway.procs import KEYS, ROOT, Gateway, auth, start_gateway, start_worker
from tests.support.asking import CONFIG
from tests.support.wait import eventually_sync


@pytest.fixture(scope="module")
def deployment(redis_url: str) -> Iterator[Deployment]:
    keys = "\n".join(
        f"    - {{tenant: {t}, sha256: {hash_key(k)}, name: {t}-test}}" for t, k in KEYS.items()
    )
    yield from make_deployment(redis_url, CONFIG + f"gateway:\n  api_keys:\n{keys}\n")


@pytest.fixture(scope="module")
def gateway(deployment: Deployment) -> Iterator[Gateway]:
    with (
        start_gateway(deployment.env) as gw,
        start_worker(deployment.env, "tests.support.asking:ApprovalAgent"),
    ):
        yield gw


@pytest.fixture
def http(gateway: Gateway) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, headers=auth(), timeout=30) as client:
        yield client


def _submit(http: httpx.Client, intent: str, **payload: Any) -> str:
    r = http.post("/v1/tasks", json={"intent": intent, "payload": payload})
    assert r.status_code == 202, r.text
    return str(r.json()["task_id"])


def _task_key(deployment: Deployment, task_id: str) -> str:
    raw = deployment.redis.get(Keys(deployment.prefix).location(task_id))
    assert isinstance(raw, bytes)
    agent, shard, _ = raw.decode().split("|")
    return Keys(deployment.prefix).shard(agent, int(shard)).task(task_id)


def _damaged(r: httpx.Response) -> None:
    assert r.status_code == 410, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["code"] == "decode_error" and "damaged" in r.json()["detail"], r.text


def _counted(gw: Gateway, record: str) -> float:
    text = httpx.get(gw.url + "/metrics", timeout=10).text
    line = f'deepagents_gateway_damaged_records_total{{record="{record}"}} '
    found = [float(x.split()[-1]) for x in text.splitlines() if x.startswith(line)]
    return found[0] if found else 0.0


def _no_traceback(gw: Gateway) -> None:
    log = gw.log.read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]


def test_an_undecodable_result_is_a_410_and_counted(
    http: httpx.Client, gateway: Gateway, deployment: Deployment
) -> None:
    task_id = _submit(http, "echo")  # no echo worker: it stays queued
    key = _task_key(deployment, task_id)
    deployment.redis.hset(key, mapping={"state": "done", "result": b"\xff{not json"})
    _damaged(http.get(f"/v1/tasks/{task_id}"))
    _damaged(http.get(f"/v1/tasks/{task_id}?wait=1"))
    deployment.redis.hset(key, "result", orjson.dumps({"status": "nonsense"}))
    _damaged(http.get(f"/v1/tasks/{task_id}"))
    assert _counted(gateway, "result") == 3
    _no_traceback(gateway)


def test_a_garbage_location_record_is_a_410_and_counted(
    http: httpx.Client, gateway: Gateway, deployment: Deployment
) -> None:
    task_id = _submit(http, "echo")
    location = Keys(deployment.prefix).location(task_id)
    for garbage in (b"garbage", b"echo|x|p2", b"\xfe\xff|0|p2"):
        deployment.redis.set(location, garbage)
        _damaged(http.get(f"/v1/tasks/{task_id}"))
    _damaged(http.post(f"/v1/tasks/{task_id}/cancel"))
    assert _counted(gateway, "location") == 4
    _no_traceback(gateway)


def test_a_question_whose_schema_is_not_an_object_is_a_410_and_counted(
    http: httpx.Client, gateway: Gateway, deployment: Deployment
) -> None:
    task_id = _submit(http, "approve", item="x")

    def waiting() -> bool:
        return bool(http.get(f"/v1/tasks/{task_id}").json()["state"] == "waiting")

    eventually_sync(waiting, timeout=30, what="the task asks")
    question = Keys(deployment.prefix).shard("approver", 0).question(task_id)
    if not deployment.redis.exists(question):
        question = Keys(deployment.prefix).shard("approver", 1).question(task_id)
    record = deployment.redis.get(question)
    assert isinstance(record, bytes)
    head, _, meta = record.partition(b"\n")
    damaged = {**orjson.loads(meta), "schema": [1, 2]}
    deployment.redis.set(question, head + b"\n" + orjson.dumps(damaged))
    _damaged(http.get(f"/v1/tasks/{task_id}"))
    _damaged(http.post(f"/v1/tasks/{task_id}/reply", json={"answer": {"approved": True}}))
    assert _counted(gateway, "question") == 2
    _no_traceback(gateway)


def test_a_non_utf8_member_of_the_waiting_index_leaves_the_cli_one_line(
    http: httpx.Client, deployment: Deployment
) -> None:
    task_id = _submit(http, "approve", item="y")

    def listed() -> bool:
        return any(w["task_id"] == task_id for w in http.get("/v1/waiting").json()["tasks"])

    eventually_sync(listed, timeout=30, what="the task is listed as waiting")
    for shard in (0, 1):
        index = Keys(deployment.prefix).shard("approver", shard).waiting
        deployment.redis.zadd(index, {b"\xff\xfe-not-an-id": 0})
    done = subprocess.run(
        [sys.executable, "-m", "deepagents", "tasks", "waiting", "--json"],
        env=deployment.env,
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    lines = done.stdout.decode().splitlines()
    assert len(lines) == 1, lines
    assert task_id in lines[0]
    assert b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    assert http.get("/v1/waiting").status_code == 200  # the gateway's listing too
