"""Schedules written as cron expressions in a time zone (croniter, the [cron] extra)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from deepagents.config import parse_config
from deepagents.config.schema import CatchUp, ScheduleConfig
from deepagents.config.slots import CronSlots
from deepagents.errors import ConfigError
from deepagents.orchestrator.schedules import due_slots


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def test_nine_in_paris_moves_with_daylight_saving() -> None:
    slots = CronSlots("0 9 * * *", "Europe/Paris")
    # Summer time starts on 29 March 2026: 09:00 in Paris is 08:00 UTC, then 07:00 UTC.
    got = slots.after(_ms("2026-03-27T12:00:00+00:00"), _ms("2026-03-30T12:00:00+00:00"), 10)
    assert [_iso(s) for s in got] == [
        "2026-03-28T08:00:00+00:00",
        "2026-03-29T07:00:00+00:00",
        "2026-03-30T07:00:00+00:00",
    ]
    assert slots.latest(_ms("2026-03-29T07:00:00+00:00")) == got[1]  # a slot at now is due


def test_a_cron_schedule_catches_up_by_its_policy() -> None:
    every_minute = {"intent": "echo", "cron": "* * * * *", "timezone": "Asia/Kolkata"}
    last = _ms("2026-06-01T10:00:00+00:00")
    now = _ms("2026-06-01T10:10:30+00:00")
    all_ = due_slots(ScheduleConfig(**every_minute, catch_up=CatchUp.ALL), last, now)
    assert len(all_.fire) == 10 and all_.cursor == _ms("2026-06-01T10:10:00+00:00")
    last_ = due_slots(ScheduleConfig(**every_minute, catch_up=CatchUp.LAST), last, now)
    assert (last_.fire, last_.passed) == ([_ms("2026-06-01T10:10:00+00:00")], 9)


@pytest.mark.parametrize(
    ("schedule", "needle"),
    [
        ("{intent: echo, cron: '61 * * * *'}", "is not a cron expression"),
        ("{intent: echo, cron: '* * * * * *'}", "is not a cron expression of five fields"),
        ("{intent: echo, cron: '0 9 * * *', timezone: Mars/Olympus}", "unknown time zone"),
        ("{intent: echo}", "give every_s or cron"),
        ("{intent: echo, every_s: 60, cron: '* * * * *'}", "give every_s or cron"),
    ],
)
def test_a_bad_schedule_fails_at_load_naming_the_field(schedule: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=r"schedules\.nightly") as caught:
        parse_config(f"schedules:\n  nightly: {schedule}\n")
    assert needle in str(caught.value)
