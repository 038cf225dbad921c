"""Issue 24 item 6: setting up the gateway from the docs and the example config."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
import yaml

from deepagents.config.gateway import GatewayConfig
from tests.cli.support import CONFIG, clean_env, deepagents
from tests.gateway.conftest import make_deployment
from tests.gateway.procs import Gateway, auth, config_yaml, start_gateway


@pytest.fixture
def gateway(redis_url: str) -> Iterator[Gateway]:
    # make_deployment deletes the prefix's keys (the tasks the tests submit) afterwards
    for deployment in make_deployment(redis_url, config_yaml()):
        with start_gateway(deployment.env) as gw:
            yield gw


def test_port_help_shows_its_default() -> None:
    done = deepagents("gateway", "--help", env=clean_env())
    assert done.returncode == 0, done.stderr
    assert "(default: 8080)" in " ".join(done.stdout.split())


def test_the_example_config_has_a_commented_gateway_section() -> None:
    text = CONFIG.read_text(encoding="utf-8")
    start = text.index("\ngateway:")
    # up to the next top-level key, whichever section follows
    end = re.search(r"\n[A-Za-z_]", text[start + 1 :])
    section = text[start : start + 1 + end.start()] if end else text[start:]
    assert yaml.safe_load(section) == {"gateway": {"api_keys": []}}
    for name in GatewayConfig.model_fields:  # every setting is named there, with its default
        if name != "request_lease_s":  # an internal safety net, not a set-up choice
            assert f"{name}:" in section, name


def test_the_gateway_says_where_it_listens(gateway: Gateway) -> None:
    assert f"deepagents gateway listening on http://127.0.0.1:{gateway.port} (pid" in (
        gateway.output()
    )


def test_an_unknown_intent_lists_no_internal_intent(gateway: Gateway) -> None:
    reply = httpx.post(
        f"{gateway.url}/v1/tasks", json={"intent": "nope", "payload": {}}, headers=auth()
    )
    assert reply.status_code == 422, reply.text
    assert "echo" in reply.text and "risk_check" in reply.text
    assert "deepagents.probe" not in reply.text


def test_the_batch_body_is_as_documented(gateway: Gateway) -> None:
    tasks = [{"intent": "echo", "payload": {"n": n}} for n in range(2)]
    url = f"{gateway.url}/v1/tasks/batch"
    accepted = httpx.post(url, json={"tasks": tasks}, headers=auth())
    assert accepted.status_code == 202, accepted.text
    assert [t["agent"] for t in accepted.json()["tasks"]] == ["echo", "echo"]
    bad = [*tasks, {"intent": "echo", "payload": []}]
    refused = httpx.post(url, json={"tasks": bad}, headers=auth())
    assert refused.status_code == 422, refused.text
    assert refused.json()["errors"][0]["field"] == "tasks.2.payload", refused.text
