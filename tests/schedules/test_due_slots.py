"""The catch-up policies as a table: which slots a leader fires after a gap."""

from __future__ import annotations

import pytest

from deepagents.config.schema import CatchUp, ScheduleConfig
from deepagents.orchestrator.schedules import Due, due_slots


def _config(catch_up: CatchUp, window_s: float = 3600) -> ScheduleConfig:
    return ScheduleConfig(intent="echo", every_s=1, catch_up=catch_up, catch_up_window_s=window_s)


S = 1_000  # one slot, in ms


def _slots(first: int, last: int) -> list[int]:
    return [s * S for s in range(first, last + 1)]


@pytest.mark.parametrize(
    ("catch_up", "window_s", "last", "now", "due"),
    [
        # a new schedule fires the slot due now, whatever the policy
        (CatchUp.ALL, 3600, None, 100 * S + 400, Due([100 * S], 0, 100 * S)),
        # on time: nothing yet, then the next slot alone
        (CatchUp.SKIP, 3600, 100 * S, 100 * S + 999, Due([], 0, None)),
        (CatchUp.SKIP, 3600, 100 * S, 101 * S + 5, Due([101 * S], 0, 101 * S)),
        # 10 s with no leader: slots 101..110 are pending
        (CatchUp.SKIP, 3600, 100 * S, 110 * S + 5, Due([], 10, 110 * S)),
        (CatchUp.LAST, 3600, 100 * S, 110 * S + 5, Due([110 * S], 9, 110 * S)),
        (
            CatchUp.ALL,
            3600,
            100 * S,
            110 * S + 5,
            Due(_slots(101, 110), 0, 110 * S),
        ),
        # all, within a 4 s window: 107..110 fire, 101..106 are passed over
        (
            CatchUp.ALL,
            4,
            100 * S + 0,
            110 * S + 500,
            Due([s * S for s in range(107, 111)], 6, 110 * S),
        ),
    ],
)
def test_the_slots_a_tick_fires(
    catch_up: CatchUp, window_s: float, last: int | None, now: int, due: Due
) -> None:
    assert due_slots(_config(catch_up, window_s), last, now) == due


def test_a_long_catch_up_goes_on_at_the_next_tick() -> None:
    config = _config(CatchUp.ALL, 7 * 86_400)
    first = due_slots(config, 0, 2_000 * S)
    assert (first.fire[0], len(first.fire), first.cursor) == (S, 500, 500 * S)
    again = due_slots(config, first.cursor, 2_000 * S)
    assert again.fire[0] == 501 * S
