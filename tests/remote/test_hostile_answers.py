"""Issue 39, findings 3-6: no remote service can poison a result.

A real gateway process, a real worker process (``deepagents worker --remote``) and the
real Node reference service answering one hostile value per task (``payload.hostile``,
a test hook): NaN, -Infinity, ``1e400``, an integer wider than 64 bits, a Retry-After of
31 years or of year 9999, and echoes of the worker's ``Authorization`` header in a
problem's detail, an error message and an output. Each task ends readable over HTTP, as
a protocol error or after its capped retries, with no secret in what the tenant reads,
no traceback in any log, and the worker still serving the next good task.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from deepagents.gateway.auth import hash_key
from tests.gateway.procs import KEYS, Gateway, Proc, auth, env_for, start_gateway
from tests.remote.conftest import (
    FOUR_CALLS,
    NODE,
    NODE_AGENT,
    Service,
    _start,
    _stop,
    remote_config,
)
from tests.support.wait import eventually_sync

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")

TOKEN = "Bearer wrk-" + uuid.uuid4().hex  # the worker's credential, which services echo
ORDER = {"symbol": "IF", "side": "buy", "quantity": 2, "price": "4000.5",
         "available_funds": "1000000.00"}  # fmt: skip


@dataclass
class Stack:
    gateway: Gateway
    worker: Proc
    service: Service
    http: httpx.Client

    def run(self, **payload: Any) -> dict[str, Any]:
        """Submit a risk check, and its task's view once it has finished."""
        r = self.http.post("/v1/tasks", json={"intent": "risk_check", "payload": payload})
        assert r.status_code == 202, r.text
        task_id = r.json()["task_id"]

        def finished() -> dict[str, Any] | None:
            view = self.http.get(f"/v1/tasks/{task_id}?wait=5")
            assert view.status_code == 200, view.text
            body: dict[str, Any] = view.json()
            return body if body["state"] in ("done", "dead") else None

        view = eventually_sync(finished, timeout=60, what=f"task {task_id} ends")
        assert view is not None
        return view


@pytest.fixture(scope="module")
def stack(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    assert NODE is not None
    hooks = {"RISK_AGENT_TEST_HOOKS": "1", "RISK_AGENT_METHODS": FOUR_CALLS}
    service = _start([NODE, str(NODE_AGENT), "--port", "0"], hooks, None)
    prefix = f"h{uuid.uuid4().hex[:10]}"
    keys = "\n".join(
        f"    - {{tenant: {t}, sha256: {hash_key(k)}, name: {t}-test}}" for t, k in KEYS.items()
    )
    config = Path(tmp_path_factory.mktemp("hostile")) / "config.yaml"
    config.write_text(
        remote_config(
            service.url,
            max_deliveries=3,
            headers_from_env="{Authorization: RISK_TOKEN}",
            max_retry_after_s=1,
        )
        + f"gateway:\n  api_keys:\n{keys}\n"
    )
    env = {**env_for(redis_url, prefix, config), "RISK_TOKEN": TOKEN}
    args = [sys.executable, "-m", "deepagents", "worker", "--remote", "risk-node"]
    client = redis.Redis.from_url(redis_url)
    try:
        with (
            start_gateway(env) as gw,
            Proc(args=args, env=env).start() as worker,
            httpx.Client(base_url=gw.url, headers=auth(), timeout=30) as http,
        ):
            yield Stack(gw, worker, service, http)
    finally:
        _stop(service)
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            client.delete(key)
        client.close()


def _no_traceback(stack: Stack) -> None:
    for proc in (stack.gateway, stack.worker):
        log = proc.log.read_text(errors="replace")
        assert "Traceback" not in log, log[-3000:]
        assert TOKEN.split()[1] not in log, "the worker's credential in a log"


def _goes_on(stack: Stack) -> None:
    good = stack.run(**ORDER)
    assert good["state"] == "done" and good["result"]["status"] == "success", good


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("nan", "NaN is not a JSON number"),
        ("infinity", "-Infinity is not a JSON number"),
        ("overflow", "number 1e400 is out of range"),
        ("wide_int", "outside 64 bits"),
    ],
)
def test_a_number_no_encoder_keeps_is_a_protocol_error(stack: Stack, kind: str, says: str) -> None:
    view = stack.run(**ORDER, hostile=kind)
    result = view["result"]
    assert view["state"] == "done" and result["status"] == "failed", view
    assert result["error"]["code"] == "remote_protocol_error", result
    assert says in result["error"]["message"], result
    assert result["metrics"]["attempts"] == 1  # not retried: the same answer would come back
    _goes_on(stack)
    _no_traceback(stack)


@pytest.mark.parametrize("kind", ["retry_forever", "retry_9999"])
def test_a_retry_after_of_decades_is_capped(stack: Stack, kind: str) -> None:
    """``max_retry_after_s: 1``: three attempts, each at most a second after the last,
    then the task is dead-lettered; it is not parked until 2057 or 9999."""
    view = stack.run(**ORDER, hostile=kind)
    assert view["state"] == "dead", view
    error = view["result"]["error"]
    assert "HTTP 503" in error["message"] or "HTTP 429" in error["message"], error
    _goes_on(stack)
    _no_traceback(stack)


@pytest.mark.parametrize("kind", ["echo_detail", "echo_message", "echo_output"])
def test_an_echoed_credential_never_reaches_the_tenant(stack: Stack, kind: str) -> None:
    view = stack.run(**ORDER, hostile=kind)
    text = stack.http.get(f"/v1/tasks/{view['task_id']}").text
    assert TOKEN.split()[1] not in text, text
    assert "[REDACTED]" in text, text
    _goes_on(stack)
    _no_traceback(stack)
