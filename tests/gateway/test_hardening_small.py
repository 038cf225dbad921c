"""Issue 16, finding 9 (the gateway's parts): no redirect built from the Host header, two
Authorization headers refused, and ``/metrics`` (which names tenants) behind a key when
``gateway.metrics_keys`` is set."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import httpx
import pytest

from deepagents.gateway.auth import hash_key
from tests.gateway.conftest import Deployment, make_deployment
from tests.gateway.procs import KEYS, Gateway, auth, config_yaml, start_gateway
from tests.support.wait import eventually_sync

SCRAPER = "dak_test_metrics_scraper_key_42"


@pytest.fixture(scope="module")
def deployment(redis_url: str) -> Iterator[Deployment]:
    text = config_yaml().replace(
        "  probe_timeout_s:", f"  metrics_keys: [{hash_key(SCRAPER)}]\n  probe_timeout_s:"
    )
    yield from make_deployment(redis_url, text)


@pytest.fixture(scope="module")
def gateway(deployment: Deployment) -> Iterator[Gateway]:
    with start_gateway(deployment.env) as gw:
        yield gw


@pytest.mark.parametrize("path", ["/v1/tasks/", "/v1/agents/", "/health/"])
def test_a_trailing_slash_is_not_redirected_to_the_host_header(gateway: Gateway, path: str) -> None:
    r = httpx.post(gateway.url + path, headers={**auth(), "Host": "evil.example"}, json={})
    assert r.status_code in (404, 405), r.status_code
    assert "location" not in r.headers
    assert r.headers["content-type"] == "application/problem+json"


@pytest.mark.parametrize("second", [KEYS["beta"], "wrong"])
def test_two_authorization_headers_are_refused(gateway: Gateway, second: str) -> None:
    headers = [
        ("Authorization", f"Bearer {KEYS['alpha']}"),
        ("Authorization", f"Bearer {second}"),
        ("Content-Type", "application/json"),
    ]
    with httpx.Client(base_url=gateway.url) as http:
        r = http.post("/v1/tasks", content=b'{"intent":"echo"}', headers=headers)
        assert r.status_code == 401 and r.json()["code"] == "unauthorized", r.text
        assert "one Authorization header" in r.json()["detail"]
        assert http.get("/v1/agents", headers=headers).status_code == 401


def test_metrics_need_the_metrics_key_when_one_is_set(gateway: Gateway) -> None:
    assert (
        httpx.post(gateway.url + "/v1/tasks", json={"intent": "echo"}, headers=auth()).status_code
        == 202
    )
    assert httpx.get(gateway.url + "/metrics").status_code == 401
    assert httpx.get(gateway.url + "/metrics", headers=auth()).status_code == 401  # a tenant's
    r = httpx.get(gateway.url + "/metrics", headers={"Authorization": f"Bearer {SCRAPER}"})
    assert r.status_code == 200 and 'tenant="alpha"' in r.text


@pytest.fixture
def own(redis_url: str) -> Iterator[Deployment]:
    """A deployment of this test alone: its config file is rewritten."""
    text = config_yaml().replace(
        "  probe_timeout_s:", f"  metrics_keys: [{hash_key(SCRAPER)}]\n  probe_timeout_s:"
    )
    yield from make_deployment(redis_url, text)


def test_a_reload_applies_the_metrics_keys_and_header_caps(own: Deployment) -> None:
    with start_gateway(own.env) as gw:
        assert gw.process is not None
        assert httpx.get(gw.url + "/metrics").status_code == 401
        assert httpx.get(gw.url + "/health", headers={"X-F": "f" * 3000}).status_code == 200
        text = own.config.read_text().replace(f"  metrics_keys: [{hash_key(SCRAPER)}]\n", "")
        own.config.write_text(text + "  max_header_field_bytes: 2048\n")
        gw.process.send_signal(signal.SIGHUP)
        eventually_sync(
            lambda: httpx.get(gw.url + "/metrics").status_code == 200,
            what="/metrics open once the reload dropped the metrics keys",
        )
        # On a connection opened after the reload: the new cap.
        r = httpx.get(gw.url + "/health", headers={"X-F": "f" * 3000})
        assert r.status_code == 431 and r.json()["code"] == "headers_too_large"


@pytest.mark.parametrize("priority", [True, False, "1", 1.0])
def test_a_priority_that_is_not_an_integer_is_refused(gateway: Gateway, priority: object) -> None:
    """Issue 39: ``priority: true`` was taken as 1."""
    body = {"intent": "echo", "payload": {}, "priority": priority}
    r = httpx.post(gateway.url + "/v1/tasks", json=body, headers=auth(), timeout=30)
    assert r.status_code == 422, r.text
    assert r.json()["code"] == "validation_error" and r.json()["errors"][0]["field"] == "priority"
    ok = httpx.post(
        gateway.url + "/v1/tasks", json={**body, "priority": 1}, headers=auth(), timeout=30
    )
    assert ok.status_code == 202, ok.text
