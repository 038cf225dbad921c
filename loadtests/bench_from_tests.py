"""Figures the tests no longer assert: their scenarios, run for the numbers.

Speed goes in benchmarks, never into assertions (issue 18). Each scenario below is a test
of the suite that checks behaviour (order, counts, states) and prints the figure it used
to bound; this script runs it with ``pytest -s``, picks that line, and reports it per run
and as medians.

    .venv/bin/python loadtests/bench_from_tests.py [--runs 3] [--only priority,outage]

Uses $DEEPAGENTS_TEST_REDIS_URL / $DEEPAGENTS_TEST_DATABASE_URL when set, as the tests do,
else the servers the tests start themselves. Prints a JSON line per scenario and run.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import orjson

REPO = Path(__file__).resolve().parents[1]


class Scenario(NamedTuple):
    node: str  # the pytest node id
    line: str  # a regex over the printed line; its named groups are the figures


NUMBER = r"[0-9.]+"
SCENARIOS = {
    "priority": Scenario(
        "tests/e2e/test_priority.py",
        rf"p0 p95 (?P<p0_p95_ms>{NUMBER}) ms .*p2 p50 (?P<p2_p50_ms>{NUMBER}) ms "
        rf"p95 (?P<p2_p95_ms>{NUMBER}) ms",
    ),
    "outage": Scenario(
        "tests/audit/test_outage.py",
        rf"PostgreSQL up: (?P<up_per_s>{NUMBER}), down: (?P<down_per_s>{NUMBER})",
    ),
    "kill9_exporter": Scenario(
        "tests/telemetry/test_processes.py::test_kill_9_leaves_the_health_ratio_and_shows_dead_since",
        rf"one live instance seen by the exporter after (?P<live_one_s>{NUMBER}) s",
    ),
    # Issue 38: kill -9 mid-task at the default settings, to the task's result on the peer.
    "kill9_resume": Scenario(
        "tests/e2e/test_dead_worker.py",
        rf"resumed and finished (?P<resumed_s>{NUMBER}) s after kill -9",
    ),
    "model_deadline": Scenario(
        "tests/modelcall/test_call.py::test_attempts_are_bounded_by_the_time_left",
        rf"cut after (?P<cut_after_s>{NUMBER}) s",
    ),
    "task_deadline": Scenario(
        "tests/e2e/test_failures.py::test_deadlines_expired_in_queue_and_while_running",
        rf"cut after a run of (?P<latency_ms>{NUMBER}) ms",
    ),
    # Issue 16: another tenant's median alone and under tenant alpha's attack (the tests
    # bound only the ratio, with a wide margin).
    "tenant_bad_numbers": Scenario(
        "tests/gateway/test_hardening_numbers.py::test_tenant_a_bad_numbers_never_change_tenant_b",
        rf"beta p50 solo (?P<solo_p50_ms>{NUMBER}) ms, under alpha (?P<under_p50_ms>{NUMBER}) ms",
    ),
    "tenant_body_flood": Scenario(
        "tests/gateway/test_hardening_parse.py::test_large_invalid_bodies_cost_their_sender_not_other_tenants",
        rf"beta p50 solo (?P<solo_p50_ms>{NUMBER}) ms, "
        rf"under alpha's 1 MiB bodies (?P<under_p50_ms>{NUMBER}) ms",
    ),
}


def run(name: str, scenario: Scenario) -> dict[str, float] | None:
    """The scenario's figures; None (and the test's output on stderr) when it failed."""
    command = [sys.executable, "-m", "pytest", scenario.node, "-q", "-s", "-p", "no:cacheprovider"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    found = re.search(scenario.line, done.stdout)
    if done.returncode != 0 or found is None:
        tail = (done.stdout + done.stderr)[-3000:]
        print(f"{name}: the test failed or printed no figure:\n{tail}", file=sys.stderr)
        return None
    return {key: float(value) for key, value in found.groupdict().items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated names")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    unknown = set(names) - SCENARIOS.keys()
    if unknown:
        parser.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    figures: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    for i in range(args.runs):
        for name in names:
            got = run(name, SCENARIOS[name])
            if got is not None:
                figures[name].append(got)
            print(orjson.dumps({"scenario": name, "run": i + 1, **(got or {"failed": 1})}).decode())
    for name, runs in figures.items():
        if not runs:
            continue
        medians = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(orjson.dumps({"scenario": name, "median_of": len(runs), **medians}).decode())


if __name__ == "__main__":
    main()
