"""Remote agents under test: the reference services as real processes, and a config naming
them (their port is known only once they listen). A test that starts the Node agent is
skipped where ``node`` is missing, and fails there under ``CI=true`` (``require_node``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.support.procs import REPO

NODE_AGENT = REPO / "agents" / "remote" / "node" / "risk-agent.js"
NODE = shutil.which("node")


def require_node() -> str:
    """The ``node`` binary. Without one the test is skipped, except in CI (``CI=true``):
    there it fails, so that the remote tests cannot pass untested. (A ``pytestmark`` in a
    conftest.py would be ignored: pytest reads it from test modules only.)"""
    if NODE is None:
        reason = "node is not installed: the remote tests run the Node reference agent"
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(f"{reason} (CI=true: .ci/run installs Debian's nodejs)")
        pytest.skip(reason)
    return NODE


class Service:
    """A reference agent process listening on loopback; its call log when hooks are on."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, log: Path | None) -> None:
        self.proc, self.port, self.log = proc, port, log
        self.url = f"http://127.0.0.1:{port}"

    def calls(self, step: str | None = None) -> list[dict[str, object]]:
        if self.log is None or not self.log.exists():
            return []
        lines = [orjson.loads(line) for line in self.log.read_bytes().splitlines()]
        return [c for c in lines if step is None or c["step"] == step]

    def stats(self) -> dict[str, int]:
        """Connections ``open`` (not counting the one asking) and ``accepted``."""
        stats: dict[str, int] = httpx.get(f"{self.url}/_stats", timeout=5).json()
        return {**stats, "open": stats["open"] - 1}


def _start(command: list[str], env: dict[str, str], log: Path | None) -> Service:
    proc = subprocess.Popen(command, cwd=REPO, env={**os.environ, **env}, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()  # "listening PORT" once it accepts connections
    if not line.startswith("listening "):
        proc.kill()
        proc.wait(10)
        raise AssertionError(f"{command[0]} did not start: {line!r}")
    return Service(proc, int(line.split()[1]), log)


StartNode = Callable[..., Service]
# The four contract methods, one call each: what a service implementing no one-call form says.
FOUR_CALLS = "can_handle,prepare_context,execute,post_process"


@pytest.fixture
def node_agent(tmp_path: Path) -> Iterator[StartNode]:
    """Starts the Node reference agent (``fault``: RISK_AGENT_FAULT; ``port``: 0 for any,
    or the port of one stopped before, to start the service again; ``methods``:
    RISK_AGENT_METHODS, the calls it implements: by default the four-call form, which the
    faults play; "run" or "run_batch" for the one-call forms); stops it after. Skipped, or
    failed in CI, without ``node`` (``require_node``)."""
    node = require_node()
    started: list[Service] = []

    def start(fault: str = "", port: int = 0, methods: str = FOUR_CALLS) -> Service:
        log = tmp_path / f"node-calls-{len(started)}.jsonl"
        env = {"RISK_AGENT_TEST_HOOKS": "1", "RISK_AGENT_FAULT": fault, "RISK_AGENT_LOG": str(log),
               "RISK_AGENT_METHODS": methods}  # fmt: skip
        service = _start([node, str(NODE_AGENT), "--port", str(port)], env, log)
        started.append(service)
        return service

    yield start
    for service in started:
        _stop(service)


@pytest.fixture
def python_agent() -> Iterator[Service]:
    command = [sys.executable, "-m", "agents.remote.python.risk_service", "--port", "0"]
    service = _start(command, {}, None)
    yield service
    _stop(service)


def stop(service: Service) -> None:
    """Kill the service (a crash: no goodbye to its clients); the fixture's stop is then a
    no-op for it."""
    _stop(service)


def _stop(service: Service) -> None:
    with contextlib.suppress(ProcessLookupError):
        service.proc.kill()
    service.proc.wait(10)
    if service.proc.stdout is not None:
        service.proc.stdout.close()


def remote_config(
    url: str, name: str = "risk-node", max_deliveries: int = 5, **remote: object
) -> str:
    """A config file with one remote risk agent at ``url``, with fast timeouts."""
    options = "".join(f", {k}: {v}" for k, v in remote.items())
    return f"""
tiers:
  p0: {{concurrency: 20, max_wait_ms: 60000}}
default_tier: p0
defaults:
  shards: 2
  max_deliveries: {max_deliveries}
  visibility_timeout_ms: 1000
  block_ms: 200
  grace_period_s: 5
  retry: {{base_ms: 50, max_ms: 200}}
agents:
  {name}:
    intents: [risk_check]
    remote: {{url: "{url}"{options}}}
"""
