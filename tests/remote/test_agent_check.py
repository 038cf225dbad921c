"""``deepagents agent-check URL`` passes the reference agents and names the rule a faulty
service breaks (the Node agent playing one)."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from tests.remote.conftest import FOUR_CALLS, Service, StartNode, _stop
from tests.support.procs import REPO

ORDER = {"symbol": "IF", "side": "buy", "quantity": 2, "price": "4000.5",
         "available_funds": "1000000.00"}  # fmt: skip


def agent_check(
    service: Service, payload: dict[str, object] = ORDER
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "deepagents", "agent-check", service.url,
               "--intent", "risk_check", "--payload", orjson.dumps(payload).decode()]  # fmt: skip
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("methods", "says"),
    [
        (FOUR_CALLS, "neither run nor run_batch"),
        (f"{FOUR_CALLS},run,run_batch", "run and run_batch: one answer per task"),
    ],
)
def test_the_node_agent_passes(node_agent: StartNode, methods: str, says: str) -> None:
    service = node_agent(methods=methods)
    run = agent_check(service)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "all 7 rules hold" in run.stdout
    assert says in run.stdout
    allowed = set(methods.split(","))
    assert {str(call["step"]) for call in service.calls()} <= allowed


def test_a_batch_answering_a_task_twice_breaks_one_call(node_agent: StartNode) -> None:
    """The check's batch carries the order it is given: one asking to be answered twice."""
    run = agent_check(node_agent(methods="run_batch"), {**ORDER, "batch": "twice"})
    assert run.returncode == 1, run.stdout + run.stderr
    assert "answered twice" in run.stdout


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
        "deepagents: error: agent-check: 'file:///etc/passwd' is not an http(s) or grpc(s) URL"
    ]


@pytest.mark.parametrize("form", ["json", "struct"])
def test_the_python_agent_over_grpc_passes_in_the_form_it_declares(form: str) -> None:
    """A ``grpc://`` URL is checked over gRPC; the JSON form, when the agent's Health
    declares it, gives the Struct form's results (``json_form``)."""
    pytest.importorskip("grpc")
    from tests.remote.test_grpc import _start_grpc

    service = _start_grpc(*(["--struct"] if form == "struct" else []))
    try:
        run = agent_check(service)
    finally:
        _stop(service)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "all 7 rules hold" in run.stdout
    says = "the JSON and Struct forms give the same result" if form == "json" else "Structs"
    assert says in run.stdout, run.stdout
