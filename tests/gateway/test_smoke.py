"""The happy path end to end: submit, wait, read, batch, agents, metrics."""

from __future__ import annotations

import httpx

from tests.gateway.procs import Gateway, Proc, auth


def test_submit_and_wait_returns_the_result(gateway: Gateway, echo_worker: Proc) -> None:
    r = httpx.post(
        gateway.url + "/v1/tasks?wait=10",
        json={"intent": "echo", "payload": {"x": 1}},
        headers=auth(),
        timeout=15,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["state"] == "done" and body["result"]["output"] == {"x": 1}
    assert body["agent"] == "echo"
