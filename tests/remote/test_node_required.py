"""Where ``node`` is missing, a test that starts the Node agent is skipped, and under
``CI=true`` it fails instead: pytest itself runs one such test, in a subprocess whose PATH
holds no ``node``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.procs import REPO

NODE_TEST = (
    "tests/remote/test_reference_agents.py::test_the_node_agent_answers_as_the_python_risk_agent"
)


def _pytest_without_node(path: Path, ci: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PATH"] = str(path)  # an empty directory: no node (python is run by its full path)
    if ci is not None:
        env["CI"] = ci
    args = [sys.executable, "-m", "pytest", NODE_TEST, "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, timeout=120, check=False)
    return done.stdout.decode(errors="replace")


@pytest.mark.parametrize(("ci", "outcome"), [(None, "1 skipped"), ("true", "1 error")])
def test_without_node_a_remote_test_skips_and_fails_under_ci(
    tmp_path: Path, ci: str | None, outcome: str
) -> None:
    out = _pytest_without_node(tmp_path, ci)
    assert outcome in out.splitlines()[-1], out[-2000:]
    assert "node is not installed" in out, out[-2000:]
