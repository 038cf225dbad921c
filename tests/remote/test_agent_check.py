"""``deepagents agent-check URL`` passes the reference agents and names the rule a faulty
service breaks (the Node agent playing one)."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from tests.remote.conftest import Service, StartNode
from tests.support.procs import REPO

ORDER = {"symbol": "IF", "side": "buy", "quantity": 2, "price": "4000.5",
         "available_funds": "1000000.00"}  # fmt: skip


def agent_check(service: Service) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "deepagents", "agent-check", service.url,
               "--intent", "risk_check", "--payload", orjson.dumps(ORDER).decode()]  # fmt: skip
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)


def test_the_node_agent_passes(node_agent: StartNode) -> None:
    run = agent_check(node_agent())
    assert run.returncode == 0, run.stdout + run.stderr
    assert "all 5 rules hold" in run.stdout


def test_a_service_of_execute_alone_passes_and_nothing_else_is_called(
    node_agent: StartNode,
) -> None:
    service = node_agent(methods="execute")
    run = agent_check(service)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "execute (as its health says)" in run.stdout
    assert {str(call["step"]) for call in service.calls()} == {"execute"}


def test_the_python_agent_passes(python_agent: Service) -> None:
    run = agent_check(python_agent)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize(
    ("fault", "rule"),
    [("slow:5000", "deadline"), ("nonce", "idempotency"), ("garbage", "schema")],
)
def test_a_broken_rule_is_named_and_fails_the_check(
    node_agent: StartNode, fault: str, rule: str
) -> None:
    run = agent_check(node_agent(fault))
    assert run.returncode == 1, run.stdout + run.stderr
    head, _, named = run.stderr.strip().partition("broken rule(s): ")
    assert head == "deepagents: agent-check: ", run.stderr
    broken = named.split(", ")
    assert rule in broken and "health" not in broken, run.stdout
    assert f"FAIL {rule}" in run.stdout


def test_a_url_that_is_not_http_is_one_line() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "deepagents", "agent-check", "file:///etc/passwd"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "deepagents: error: agent-check: 'file:///etc/passwd' is not an http(s) URL"
    ]
