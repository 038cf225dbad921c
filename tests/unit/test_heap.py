"""freeze_startup_heap: start-up objects leave the collector's view, young passes are spaced out."""

from __future__ import annotations

import subprocess
import sys


def test_freeze_startup_heap_freezes_and_spaces_young_passes_out() -> None:
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
    _passes_in_a_child(code)


def test_the_cli_freezes_what_its_imports_made_so_no_young_pass_walks_it() -> None:
    """The command's modules load with the collector off; re-enabled, its first young pass
    walked every object they made (about 90,000 for the worker's) unless they are frozen."""
    code = (
        "import gc\n"
        "walked = []\n"
        "def seen(phase, info):\n"
        "    if phase == 'start' and info['generation'] == 0:\n"
        "        walked.append(len(gc.get_objects(0)))\n"
        "gc.callbacks.append(seen)\n"
        "import sys\n"
        "from deepagents.cli.main import main\n"
        "sys.argv = ['deepagents', 'worker', '--help']  # as the console script runs it\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "junk = [[i] for i in range(5000)]  # enough to start young passes\n"
        "assert walked and max(walked) < 10_000, walked\n"
        "assert gc.get_freeze_count() > 50_000, gc.get_freeze_count()\n"
    )
    _passes_in_a_child(code)


def test_main_called_with_arguments_freezes_nothing_of_its_caller() -> None:
    """Called from a program with ``argv`` (tests do), ``main`` leaves the caller's heap to
    the collector: frozen, its uncollected cycles would be kept for good."""
    code = (
        "import gc\n"
        "from deepagents.cli.main import main\n"
        "try:\n"
        "    main(['worker', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "assert gc.get_freeze_count() == 0, gc.get_freeze_count()\n"
    )
    _passes_in_a_child(code)


def _passes_in_a_child(code: str) -> None:
    """Run ``code`` in a fresh interpreter (freezing the test process's own heap would
    outlive the test) and fail with its traceback if an assertion in it failed."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
