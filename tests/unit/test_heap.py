"""The long-lived processes' collector settings: start-up heap frozen, young pass rarer."""

from __future__ import annotations

import gc

from deepagents._internal.heap import YOUNG_THRESHOLD, freeze_startup_heap


def test_freeze_startup_heap_freezes_and_raises_the_young_threshold() -> None:
    before = gc.get_threshold()
    try:
        freeze_startup_heap()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (YOUNG_THRESHOLD, before[1], before[2])
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
