"""``SIGHUP`` reloads the gateway's config file (RELIABILITY row 53): a file cut off in
the middle of an edit, or one the running fleet cannot take, leaves the running config in
service; a good one is swapped in whole, routing rules and API keys alike."""

from __future__ import annotations

import signal
import socket
from collections.abc import Iterator

import httpx
import orjson
import pytest

from tests.gateway.conftest import Deployment, make_deployment
from tests.gateway.procs import Gateway, auth, config_yaml, start_gateway
from tests.support.wait import eventually_sync
from tests.telemetry.support import samples

URGENT_P0 = "payload.urgent: true}, tier: p0"


@pytest.fixture
def own(redis_url: str) -> Iterator[Deployment]:
    """A deployment of this test alone: its config file is rewritten."""
    yield from make_deployment(redis_url, config_yaml())


def _urgent(gw: Gateway, tenant: str = "alpha") -> httpx.Response:
    body = {"intent": "echo", "payload": {"urgent": True}}
    return httpx.post(gw.url + "/v1/tasks", json=body, headers=auth(tenant), timeout=15)


def _reloads(gw: Gateway, outcome: str) -> float:
    text = httpx.get(gw.url + "/metrics", timeout=15).text
    series = samples(text).get("deepagents_gateway_config_reloads_total", [])
    return sum(value for labels, value in series if labels == {"outcome": outcome})


def _hang_up(gw: Gateway, outcome: str, count: int) -> None:
    assert gw.process is not None
    gw.process.send_signal(signal.SIGHUP)
    eventually_sync(lambda: _reloads(gw, outcome) == count, what=f"reload {outcome} #{count}")
    assert gw.process.poll() is None, gw.output()


def _silent_answer(gw: Gateway) -> bytes:
    """What a connection that sends nothing gets: 408 once the header deadline passes."""
    with socket.create_connection(("127.0.0.1", gw.port), timeout=15) as silent:
        reply = b""
        while chunk := silent.recv(4096):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    detail = orjson.loads(reply.split(b"\r\n\r\n", 1)[1])["detail"]
    assert isinstance(detail, str)
    return detail.encode()


def test_sighup_swaps_in_a_good_file_and_keeps_the_running_one_otherwise(own: Deployment) -> None:
    good = own.config.read_text()
    with start_gateway(own.env) as gw:
        assert _urgent(gw).json()["tier"] == "p0"
        assert _urgent(gw, "beta").status_code == 202

        # Cut off mid-edit: the file no longer parses.
        own.config.write_text(good[: good.index("max_wait_ms")])
        _hang_up(gw, "failed", 1)
        assert "config reload failed, the running config stays" in gw.output()
        assert _urgent(gw).json()["tier"] == "p0"

        # Valid, but the fleet cannot take it: tasks would go to other shards.
        own.config.write_text(good.replace("defaults: {shards: 2,", "defaults: {shards: 4,"))
        _hang_up(gw, "failed", 2)
        assert "shards changed (2 -> 4)" in gw.output()
        assert _urgent(gw).json()["tier"] == "p0"

        # A good file: urgent echo tasks go to p1 now, beta's key is revoked, and the
        # header deadline is 1 s for the connections opened from now on.
        assert _silent_answer(gw).endswith(b"did not arrive within 2.0 s")
        revoked = "\n".join(line for line in good.splitlines() if "beta-test" not in line)
        changed = revoked.replace(URGENT_P0, URGENT_P0.replace("p0", "p1"))
        own.config.write_text(changed.replace("header_timeout_s: 2.0", "header_timeout_s: 1.0"))
        _hang_up(gw, "ok", 1)
        assert _urgent(gw).json()["tier"] == "p1"
        assert _urgent(gw, "beta").status_code == 401
        assert _silent_answer(gw).endswith(b"did not arrive within 1.0 s")
        assert _reloads(gw, "failed") == 2


def test_with_workers_a_sighup_replaces_the_processes_or_keeps_them(own: Deployment) -> None:
    """``--workers N``: uvicorn's parent takes the signal and replaces its processes one by
    one, each reading the file as it starts; one that cannot start is stopped, the old one
    kept."""
    good = own.config.read_text()
    with start_gateway(own.env, "--workers", "2") as gw:
        assert gw.process is not None
        assert _urgent(gw).json()["tier"] == "p0"

        own.config.write_text(good[: good.index("max_wait_ms")])
        gw.process.send_signal(signal.SIGHUP)
        eventually_sync(lambda: "aborting the restart" in gw.output(), what="restart given up")
        assert "cannot start: " in gw.output() and "Traceback" not in gw.output()
        assert {_urgent(gw).json()["tier"] for _ in range(6)} == {"p0"}

        own.config.write_text(good.replace(URGENT_P0, URGENT_P0.replace("p0", "p1")))
        gw.process.send_signal(signal.SIGHUP)

        def replaced() -> bool:  # new connections each time: both processes answer
            return {_urgent(gw).json()["tier"] for _ in range(6)} == {"p1"}

        eventually_sync(replaced, what="every process on the new file")
        assert gw.process.poll() is None
