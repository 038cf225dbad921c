"""GET /v1/tasks/{id}/events over a real gateway and a real worker process, with the audit
outbox on: a subscriber sees every audit event of a task, in order, from submit to result;
one that disconnects and reconnects with Last-Event-ID misses none and sees none twice;
another tenant's task is 404; a stream needs a key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis

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
    for d in make_deployment(redis_url, _config()):
        d.env["DEEPAGENTS_OUTBOX"] = "true"
        yield d


@pytest.fixture(scope="module")
def worker(deployment: Deployment) -> Iterator[Proc]:
    with start_worker(deployment.env, "tests.support.asking:ApprovalAgent") as proc:
        yield proc


@pytest.fixture(scope="module")
def http(deployment: Deployment, worker: Proc) -> Iterator[httpx.Client]:
    with (
        start_gateway(deployment.env, ready_s=120) as gw,
        httpx.Client(base_url=gw.url, timeout=60) as client,
    ):
        yield client


Event = tuple[str, str, dict[str, Any]]  # (id, type, data)


def _events(
    http: httpx.Client, task_id: str, *, last_id: str | None = None, until: str | None = None
) -> list[Event]:
    """The stream's events until it ends, or until an event of type ``until`` (then the
    connection is closed: a subscriber that goes away)."""
    headers = auth() | ({"Last-Event-ID": last_id} if last_id else {})
    out: list[Event] = []
    with http.stream("GET", f"/v1/tasks/{task_id}/events", headers=headers) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        fields: dict[str, str] = {}
        for line in r.iter_lines():
            if line:
                name, _, value = line.partition(": ")
                fields[name] = value
                continue
            if "id" in fields:
                out.append((fields["id"], fields["event"], orjson.loads(fields["data"])))
                if fields["event"] == until:
                    return out
            fields = {}
    return out


def _outbox(deployment: Deployment, task_id: str) -> list[dict[str, Any]]:
    """Every audit event of the task in Redis, read straight from the outbox streams."""
    client = redis.Redis.from_url(deployment.redis_url)
    found = []
    for shard in range(2):
        stream = Keys(deployment.prefix).shard("approver", shard).outbox
        for _, fields in client.xrange(stream):  # type: ignore[union-attr]
            events = orjson.loads(fields[b"events"])  # type: ignore[index]
            found += [e for e in events if e.get("task_id") == task_id]
    client.close()
    return sorted(found, key=lambda e: str(e["event_id"]))


def _submit(http: httpx.Client, runs: Path) -> str:
    body = {"intent": "approve", "payload": {"runs": str(runs), "item": "order 7"}}
    r = http.post("/v1/tasks", json=body, headers=auth())
    assert r.status_code == 202, r.text
    return str(r.json()["task_id"])


def _reply(http: httpx.Client, task_id: str) -> None:
    def waiting() -> bool:
        return bool(http.get(f"/v1/tasks/{task_id}", headers=auth()).json()["state"] == "waiting")

    eventually_sync(waiting, timeout=30, what="the task waits for a reply")
    r = http.post(f"/v1/tasks/{task_id}/reply", json={"answer": {"approved": True}}, headers=auth())
    assert r.status_code == 200, r.text


# The story of an approval: submitted, run until it asks, answered, run again to the end.
STORY = [
    "submitted",
    "started",
    "step_completed",
    "waiting",
    "replied",
    "started",
    "step_completed",
    "succeeded",
]


def test_a_subscriber_sees_every_event_of_a_task_in_order(
    http: httpx.Client, deployment: Deployment, tmp_path: Path
) -> None:
    task_id = _submit(http, tmp_path / "runs")
    seen = _events(http, task_id, until="waiting")
    _reply(http, task_id)
    seen += _events(http, task_id, last_id=seen[-1][0])
    recorded = _outbox(deployment, task_id)
    assert [e[0] for e in seen] == [str(e["event_id"]) for e in recorded]
    assert [t for _, t, _ in seen if t in STORY] == STORY
    assert all(data["task_id"] == task_id for _, _, data in seen)
    assert seen[-1][2]["output"]["output"] == {"approved": True, "note": ""}


def test_a_subscriber_from_the_start_gets_the_whole_story_in_one_stream(
    http: httpx.Client, deployment: Deployment, tmp_path: Path
) -> None:
    task_id = _submit(http, tmp_path / "runs")
    _reply(http, task_id)
    seen = _events(http, task_id)  # ends by itself after the result
    assert [t for _, t, _ in seen if t in STORY] == STORY
    assert [e[0] for e in seen] == [str(e["event_id"]) for e in _outbox(deployment, task_id)]


def test_reconnecting_with_last_event_id_misses_none_and_repeats_none(
    http: httpx.Client, deployment: Deployment, tmp_path: Path
) -> None:
    """The subscriber drops after each event and comes back with the last id it saw."""
    task_id = _submit(http, tmp_path / "runs")
    _reply(http, task_id)
    seen: list[Event] = []
    while not seen or seen[-1][1] != "succeeded":
        last = seen[-1][0] if seen else None
        headers = auth() | ({"Last-Event-ID": last} if last else {})
        with http.stream("GET", f"/v1/tasks/{task_id}/events", headers=headers) as r:
            fields: dict[str, str] = {}
            for line in r.iter_lines():
                if line:
                    name, _, value = line.partition(": ")
                    fields[name] = value
                elif "id" in fields:
                    seen.append((fields["id"], fields["event"], orjson.loads(fields["data"])))
                    break
                else:
                    fields = {}
    ids = [e[0] for e in seen]
    assert ids == [str(e["event_id"]) for e in _outbox(deployment, task_id)]
    assert len(set(ids)) == len(ids)


def test_another_tenant_s_task_and_a_missing_key_are_refused(
    http: httpx.Client, tmp_path: Path
) -> None:
    task_id = _submit(http, tmp_path / "runs")
    other = http.get(f"/v1/tasks/{task_id}/events", headers=auth("beta"))
    assert other.status_code == 404 and other.json()["code"] == "not_found"
    bare = http.get(f"/v1/tasks/{task_id}/events")
    assert bare.status_code == 401
    bad = http.get(f"/v1/tasks/{task_id}/events", headers=auth() | {"Last-Event-ID": "not an id"})
    assert bad.status_code == 422 and bad.json()["code"] == "validation_error"
    _reply(http, task_id)
