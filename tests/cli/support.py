"""Run the real ``deepagents`` command as a new user would, and check its one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "config" / "deepagents.yaml"


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without any DEEPAGENTS_* (as on a fresh machine), plus
    ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEEPAGENTS_")}
    return {**env, **extra}


def deepagents(
    *args: str, env: dict[str, str], cwd: Path = REPO, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "deepagents", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def one_line_error(done: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    """Assert the command failed with ``code`` and exactly one stderr line holding each
    needle (no traceback); return that line."""
    lines = done.stderr.splitlines()
    shown = f"exit {done.returncode}, stderr:\n{done.stderr[-3000:]}"
    assert done.returncode == code, shown
    assert len(lines) == 1, shown
    line = lines[0]
    assert line.startswith("deepagents: error: "), shown
    for needle in needles:
        assert needle in line, shown
    return line


def table_rows(text: str, first_cell: str) -> list[list[str]]:
    """The cells of each row of a rich table whose first cell contains ``first_cell``."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells and first_cell in cells[0]:
            rows.append(cells)
    return rows
