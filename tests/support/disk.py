"""A small disk of its own for a test that fills it (a tmpfs mount; needs root)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(size_mb: int) -> Iterator[Path]:
    """A tmpfs of ``size_mb`` MB, mounted on a new directory of the system's temporary
    directory (which any user may reach: a server running as another user can use it),
    unmounted and removed afterwards. The test is skipped where mounting is not allowed,
    except in CI (``CI=true``): there a missing capability fails it, so that it cannot pass
    untested."""
    path = Path(tempfile.mkdtemp(prefix="deepagents-disk-"))
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0755", "tmpfs", str(path)]
    try:
        subprocess.run(mount, check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        path.rmdir()
        reason = f"mounting a small tmpfs as a disk to fill needs root: {exc}"
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(f"{reason} (CI=true: run the tests as root, or with CAP_SYS_ADMIN)")
        pytest.skip(reason)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, timeout=30)
        path.rmdir()


def fill(path: Path) -> None:
    """Write zeros to ``path`` until its disk is full."""
    # ENOSPC ends the loop, and may end the close too (its flush of what is left)
    with contextlib.suppress(OSError), path.open("wb") as out:
        while True:
            out.write(bytes(65536))
            out.flush()
