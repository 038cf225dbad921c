"""The shipped alert rules under ``promtool test rules`` (issue 38): a killed instance
among healthy ones pages no one; no live instance pages once; live instances failing
their health checks page."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.telemetry.support import promtool

RULE_TESTS = Path(__file__).parent / "rules"


def test_the_agent_health_alerts_fire_on_live_instances_only() -> None:
    done = subprocess.run(
        [promtool(), "test", "rules", "agent_health_test.yml"],
        cwd=RULE_TESTS,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
