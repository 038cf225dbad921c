"""freeze_startup_heap: start-up objects leave the collector's view, young passes are spaced out."""

from __future__ import annotations

import subprocess
import sys


def test_freeze_startup_heap_freezes_and_spaces_young_passes_out() -> None:
    # In a child: freezing the test process's own heap would outlive this test.
    code = (
        "import gc\n"
        "from deepagents._internal.heap import YOUNG_THRESHOLD, freeze_startup_heap\n"
        "before = gc.get_threshold()\n"
        "passes = []\n"
        "gc.callbacks.append(lambda phase, info: passes.append(info['generation']))\n"
        "freeze_startup_heap()\n"
        "assert passes == [], passes  # no collection: it walks the whole heap at start\n"
        "after = gc.get_threshold()\n"
        "assert gc.get_freeze_count() > 1000, gc.get_freeze_count()\n"
        "assert after == (YOUNG_THRESHOLD, *before[1:]), (before, after)\n"
        "assert YOUNG_THRESHOLD > before[0]\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
