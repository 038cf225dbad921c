"""An unhealthy remote service is marked in the registry, and the gateway's
``/health?full=true`` names it with the reason its worker recorded, until it is back."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from deepagents._internal.redis_server import free_port
from tests.gateway.conftest import Deployment, make_deployment
from tests.gateway.procs import Gateway, Proc, config_yaml, start_gateway
from tests.remote.conftest import StartNode
from tests.support.wait import eventually_sync

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def port() -> int:
    """Where the service will listen: nothing does at first."""
    return free_port()


def _config(port: int) -> str:
    text = config_yaml(probe_timeout_s=1.0).replace(
        "  probe_timeout_s: 1.0\n", "  probe_timeout_s: 1.0\n  probe_cache_s: 0.2\n"
    )
    remote = (
        f'  risk-node: {{intents: [risk_remote], remote: {{url: "http://127.0.0.1:{port}"}}}}\n'
    )
    return text.replace("agents:\n", "agents:\n" + remote, 1)


@pytest.fixture
def deployment(redis_url: str, port: int) -> Iterator[Deployment]:
    yield from make_deployment(redis_url, _config(port))


@pytest.fixture
def gateway(deployment: Deployment) -> Iterator[Gateway]:
    with start_gateway(deployment.env) as gw:
        yield gw


def named(gw: Gateway) -> list[dict[str, Any]]:
    body = httpx.get(gw.url + "/health?full=true", timeout=15).json()
    return [a for a in body["unhealthy_agents"] if a["name"] == "risk-node"]


def test_a_remote_service_down_is_named_by_the_full_health_check_until_it_is_back(
    deployment: Deployment, gateway: Gateway, node_agent: StartNode, port: int
) -> None:
    env = {**deployment.env, "DEEPAGENTS_HEALTH_INTERVAL_S": "0.5"}
    command = [sys.executable, "-m", "deepagents", "worker", "--remote", "risk-node"]
    with Proc(args=command, env=env).start():
        (agent,) = eventually_sync(lambda: named(gateway), timeout=60, what="risk-node named")
        assert agent["instances"] == 1 and agent["healthy"] == 0, agent
        assert agent["detail"].startswith("remote service: GET /v1/health: ConnectError"), agent
        # Anyone reads this page: the service's address is not theirs to learn (issue 39).
        assert str(port) not in agent["detail"] and "127.0.0.1" not in agent["detail"], agent

        node_agent(port=port)  # the service comes up
        eventually_sync(lambda: not named(gateway), timeout=60, what="risk-node healthy again")
