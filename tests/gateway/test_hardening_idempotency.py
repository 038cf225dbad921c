"""Issue 39, finding 2: a retried submit never returns a task its tenant cannot see.

An idempotency key was claimed (SET NX) before the enqueue and kept whatever happened
next. A batch refused with 409 kept its other items' keys, a submit refused with 503
kept its key: the retry got ``duplicate: true`` and the id of a task that was never
enqueued, whose owner record the refusal had removed, so GET, reply and cancel answered
404 while the task ran. Now a refusal releases the claims it made (compare and delete),
and a retry that meets a live claim writes its task's owner and location records again.

Each path over a real gateway process, a real worker process and Redis: the retry's task
id is one the tenant can GET, reply to and cancel, and the idempotency keys left in Redis
(scanned) are exactly the ones bound to readable tasks.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from deepagents.config import Settings, load_config
from deepagents.contract import Task
from deepagents.contract.task import new_task_id
from deepagents.gateway.auth import hash_key
from deepagents.orchestrator import Orchestrator
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams.pool import connect
from tests.gateway.conftest import Deployment, make_deployment
from tests.gateway.procs import KEYS, Gateway, auth, start_gateway, start_worker
from tests.support.asking import CONFIG
from tests.support.wait import eventually_sync

# ``patterned`` on one shard with room for one entry: with no worker, its second submit
# is a 503.
_TIGHT = (
    '  patterned: {class: "tests.support.asking:PatternAgent",'
    " settings: {shards: 1, max_backlog: 1}}\n"
)


@pytest.fixture(scope="module")
def deployment(redis_url: str) -> Iterator[Deployment]:
    keys = "\n".join(
        f"    - {{tenant: {t}, sha256: {hash_key(k)}, name: {t}-test}}" for t, k in KEYS.items()
    )
    config = CONFIG.replace('  patterned: {class: "tests.support.asking:PatternAgent"}\n', _TIGHT)
    assert _TIGHT in config
    yield from make_deployment(redis_url, config + f"gateway:\n  api_keys:\n{keys}\n")


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


def _claims(deployment: Deployment) -> dict[str, str]:
    """Every idempotency key of the deployment: digest -> the task id it holds."""
    out = {}
    for key in deployment.redis.scan_iter(match=f"{deployment.prefix}:idem:*", count=1000):
        value: Any = deployment.redis.get(key)
        out[key.decode().rsplit(":", 1)[-1]] = value.decode().partition(" ")[0]
    return out


def _digest(key: str, tenant: str = "alpha") -> str:
    return Keys("x").idempotency(key, tenant).rsplit(":", 1)[-1]


def _usable(http: httpx.Client, task_id: str, answer: dict[str, Any]) -> None:
    """The tenant can GET the task, reply to its question and (then) cancel it: no 404."""

    def waiting() -> bool:
        r = http.get(f"/v1/tasks/{task_id}")
        assert r.status_code == 200, r.text
        return bool(r.json()["state"] == "waiting")

    eventually_sync(waiting, timeout=30, what=f"task {task_id} waits for a reply")
    r = http.post(f"/v1/tasks/{task_id}/reply", json={"answer": answer})
    assert r.status_code == 200, r.text
    cancel = http.post(f"/v1/tasks/{task_id}/cancel")
    assert cancel.status_code in (200, 409), cancel.text  # done by now, or not yet: not 404
    done = http.get(f"/v1/tasks/{task_id}?wait=20")
    assert done.status_code == 200 and done.json()["state"] == "done", done.text


def _approve(key: str, item: str) -> dict[str, Any]:
    return {"intent": "approve", "idempotency_key": key, "payload": {"item": item}}


def test_a_batch_refused_409_releases_its_other_keys(
    http: httpx.Client, deployment: Deployment
) -> None:
    k1, k2 = f"k1-{uuid.uuid4().hex}", f"k2-{uuid.uuid4().hex}"
    first = http.post("/v1/tasks", json=_approve(k1, "one"))
    assert first.status_code == 202, first.text
    batch = {"tasks": [_approve(k2, "two"), _approve(k1, "something else")]}
    refused = http.post("/v1/tasks/batch", json=batch)
    assert refused.status_code == 409 and refused.json()["code"] == "idempotency_conflict"
    claims = _claims(deployment)
    assert _digest(k2) not in claims, "the refused batch left its other key claimed"
    assert claims[_digest(k1)] == first.json()["task_id"]

    retry = http.post("/v1/tasks", json=_approve(k2, "two"))
    assert retry.status_code == 202 and retry.json()["duplicate"] is False, retry.text
    assert _claims(deployment)[_digest(k2)] == retry.json()["task_id"]
    _usable(http, retry.json()["task_id"], {"approved": True})


def test_a_submit_refused_503_releases_its_key(http: httpx.Client, deployment: Deployment) -> None:
    filler = http.post("/v1/tasks", json={"intent": "note", "payload": {}})
    assert filler.status_code == 202, filler.text  # the stream's one entry
    key = f"k-{uuid.uuid4().hex}"
    body = {"intent": "note", "idempotency_key": key, "payload": {}}
    refused = http.post("/v1/tasks", json=body)
    assert refused.status_code == 503 and refused.json()["code"] == "overloaded", refused.text
    assert _digest(key) not in _claims(deployment), "the refused submit left its key claimed"

    # A worker comes: the filler is delivered and parks (its stream entry goes), the
    # backlog drains, and the client's retry gets through.
    with start_worker(deployment.env, "tests.support.asking:PatternAgent"):

        def accepted() -> httpx.Response | None:
            r = http.post("/v1/tasks", json=body)
            if r.status_code == 503:
                assert _digest(key) not in _claims(deployment)
                return None
            return r

        retry = eventually_sync(accepted, timeout=30, what="the backlog drains")
        assert retry is not None
        assert retry.status_code == 202 and retry.json()["duplicate"] is False, retry.text
        assert _claims(deployment)[_digest(key)] == retry.json()["task_id"]
        _usable(http, retry.json()["task_id"], {"note": "fine"})


def test_a_retry_meeting_a_task_whose_submit_lost_its_records_can_read_it(
    http: httpx.Client, deployment: Deployment
) -> None:
    """A submit cancelled, or cut off from Redis, after its enqueue landed: the gateway
    removed the task's records, the claim stands. The retry returns that task, readable."""
    key = f"k-{uuid.uuid4().hex}"
    body = _approve(key, "lost")

    async def enqueue_without_records() -> str:
        settings = Settings(redis_url=deployment.redis_url, prefix=deployment.prefix)
        client = connect(deployment.redis_url)
        try:
            config = load_config(deployment.config)
            async with Orchestrator.from_client(client, config=config, settings=settings) as o:
                handle = await o.submit(Task(**body, tenant="alpha"))
                await o.tasks.forget_submitted([handle.task_id])
                return handle.task_id
        finally:
            await client.aclose()

    first = asyncio.run(enqueue_without_records())
    assert http.get(f"/v1/tasks/{first}").status_code == 404  # as the tenant met it
    retry = http.post("/v1/tasks", json=body)
    assert retry.status_code == 202 and retry.json()["duplicate"] is True, retry.text
    assert retry.json()["task_id"] == first
    _usable(http, first, {"approved": False})
    assert http.get(f"/v1/tasks/{first}", headers=auth("beta")).status_code == 404


def test_a_cancelled_submit_leaves_no_claim_that_hides_its_task(deployment: Deployment) -> None:
    """Cancelled at every point of its way (claim, enqueue): a retry with the key either
    makes the task or returns the one the cancelled submit enqueued, never a missing one
    and never a second one (a claim released on cancel would let the enqueue that landed
    run beside the retry's)."""

    async def sweep() -> None:
        settings = Settings(redis_url=deployment.redis_url, prefix=deployment.prefix)
        client = connect(deployment.redis_url)
        try:
            config = load_config(deployment.config)
            async with Orchestrator.from_client(client, config=config, settings=settings) as o:
                for steps in range(12):
                    task = Task(**_approve(f"c{steps}-{uuid.uuid4().hex}", "c"), tenant="alpha")
                    pending = asyncio.ensure_future(o.submit(task))
                    for _ in range(steps):
                        await asyncio.sleep(0)
                    pending.cancel()
                    await asyncio.gather(pending, return_exceptions=True)
                    retry = await o.submit(task.model_copy(update={"task_id": new_task_id()}))
                    assert await o.lookup(retry.task_id) is not None, steps
                    if await o.lookup(task.task_id) is not None:  # its enqueue had landed
                        assert retry.task_id == task.task_id, f"two tasks for one key ({steps})"
        finally:
            await client.aclose()

    asyncio.run(sweep())
