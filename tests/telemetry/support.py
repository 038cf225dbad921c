"""Helpers of the telemetry tests: free ports, scraping, promtool."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

# Every metric the issue names, as exposed in the text format.
WORKER_METRICS = {
    "deepagents_tasks_completed_total",
    "deepagents_task_latency_seconds_bucket",
    "deepagents_task_queue_wait_seconds_bucket",
    "deepagents_task_execution_seconds_bucket",
    "deepagents_tasks_in_flight",
    "deepagents_agent_health_checks_total",
    "deepagents_agent_health_checks_healthy_total",
    "deepagents_model_calls_total",
    "deepagents_model_call_seconds_bucket",
    "deepagents_model_call_tokens_total",
    "deepagents_model_call_cost_usd_total",
    "deepagents_model_call_retries_total",
    "deepagents_model_circuit_state",
}
SUBMIT_METRICS = {"deepagents_tasks_submitted_total"}
FLEET_METRICS = {
    "deepagents_stream_pending_messages",
    "deepagents_stream_consumer_lag",
    "deepagents_stream_oldest_pending_age_seconds",
    "deepagents_dead_letters",
    "deepagents_delayed_tasks",
    "deepagents_audit_outbox_backlog",
    "deepagents_agent_health_ratio",
    "deepagents_agent_live_instances",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        return str(reply.read().decode())


def try_scrape(port: int) -> str:
    try:
        return scrape(port)
    except OSError:
        return ""


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)], parsed with prometheus_client's official parser."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def promtool() -> str:
    """promtool's path. In CI (.ci/run installs Debian's prometheus) its absence fails the
    test; locally it may be skipped, with the reason."""
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("CI") or os.environ.get("DEEPAGENTS_TEST_REQUIRE_PROMTOOL"):
            pytest.fail("promtool is missing: .ci/run installs Debian's prometheus package")
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return path


def promtool_check_metrics(text: str) -> None:
    done = subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
