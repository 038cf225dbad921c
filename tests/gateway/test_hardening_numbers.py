"""Issue 16, finding 1: one tenant's bad number never fails another tenant's request.

An integer outside 64 bits passed the body parser but not orjson, which encodes every
task: a 500, and, since single submits of all tenants share one enqueue, a 500 for every
other task of the same coalesced group. Now it is a 400 at the edge that names the field,
and a coalesced group isolates whatever else one task may raise.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis

from deepagents.config import Settings, load_config
from deepagents.contract import Task
from deepagents.orchestrator import Orchestrator
from tests.gateway.procs import Gateway, auth
from tests.gateway.tenants import attack_with, b_under_attack, tenant_b

REPO = Path(__file__).resolve().parents[2]
TOO_BIG, TOO_SMALL = 2**64, -(2**63) - 1


def _problem(r: httpx.Response, status: int, code: str) -> dict[str, object]:
    assert r.status_code == status, r.text[:300]
    assert r.headers["content-type"] == "application/problem+json"
    doc: dict[str, object] = r.json()
    assert doc["code"] == code
    return doc


@pytest.mark.parametrize("value", [TOO_BIG, TOO_SMALL, 99999999999999999999])
def test_an_integer_outside_64_bits_is_a_400_naming_the_field(gateway: Gateway, value: int) -> None:
    body = f'{{"intent":"echo","payload":{{"a":[1,{{"n":{value}}}]}}}}'
    r = httpx.post(
        gateway.url + "/v1/tasks",
        content=body,
        headers={**auth(), "Content-Type": "application/json"},
    )
    doc = _problem(r, 400, "number_out_of_range")
    assert doc["errors"] == [{"field": "payload.a.1.n", "message": doc["errors"][0]["message"]}]  # type: ignore[index]
    assert str(doc["detail"]).startswith("payload.a.1.n: ")


def test_a_batch_names_the_task_and_field(gateway: Gateway) -> None:
    body = f'{{"tasks":[{{"intent":"echo"}},{{"intent":"echo","payload":{{"n":{TOO_BIG}}}}}]}}'
    r = httpx.post(
        gateway.url + "/v1/tasks/batch",
        content=body,
        headers={**auth(), "Content-Type": "application/json"},
    )
    doc = _problem(r, 400, "number_out_of_range")
    assert doc["errors"][0]["field"] == "tasks.1.payload.n"  # type: ignore[index]


def test_the_64_bit_extremes_are_accepted(gateway: Gateway) -> None:
    payload = {"max": 2**64 - 1, "min": -(2**63)}
    r = httpx.post(
        gateway.url + "/v1/tasks", json={"intent": "echo", "payload": payload}, headers=auth()
    )
    assert r.status_code == 202, r.text


async def test_a_coalesced_group_fails_only_the_task_that_broke_it(
    client: Redis, settings: Settings
) -> None:
    """Behind the edge: a task the codec cannot encode (an error no refusal names) fails
    alone, and the other tasks of its group, other tenants', are enqueued."""
    config = load_config(REPO / "config" / "deepagents.yaml")
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        good = [Task(intent="echo", payload={"i": i}, tenant="beta") for i in range(20)]
        bad = Task(intent="echo", payload={"n": TOO_BIG}, tenant="alpha")
        tasks = [*good[:10], bad, *good[10:]]
        results = await asyncio.gather(*(orch.submit(t) for t in tasks), return_exceptions=True)
    assert isinstance(results[10], TypeError)
    handles = results[:10] + results[11:]
    assert [getattr(h, "task_id", h) for h in handles] == [t.task_id for t in good]


def test_tenant_a_bad_numbers_never_change_tenant_b(gateway: Gateway) -> None:
    """Alpha sends 400 out-of-range submits over 8 clients while beta submits good ones
    over 4: every beta submit is accepted, every alpha one is a 400. Beta's median under
    the attack against alone is printed, not bounded (a ratio of latencies moves with the
    machine's load; docs/benchmarks.md, "Gateway: one tenant against another")."""
    body = f'{{"intent":"echo","payload":{{"n":{TOO_BIG}}}}}'.encode()

    def bad(http: httpx.Client) -> int:
        r = http.post("/v1/tasks", content=body, headers={"Content-Type": "application/json"})
        return r.status_code

    solo = tenant_b(gateway, count=50)
    under, a_statuses = b_under_attack(gateway, attack_with(gateway, 400, 8, bad), count=50)
    assert set(solo.statuses) == {202} and set(under.statuses) == {202}, under.statuses
    assert set(a_statuses) == {400}, a_statuses
    ratio = under.p50_ms / solo.p50_ms
    print(f"beta p50 solo {solo.p50_ms:.2f} ms, under alpha {under.p50_ms:.2f} ms ({ratio:.2f}x)")
