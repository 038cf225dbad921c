"""The slots of a recurring schedule: whole multiples of an interval since the epoch, or
the times a cron expression names in a time zone (croniter, the [cron] extra). Times are
ms since the epoch; a slot is the time it is due."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from deepagents._internal.extras import require_extra


class Slots(Protocol):
    def latest(self, until_ms: int) -> int:
        """The newest slot at or before ``until_ms``."""
        ...

    def after(self, after_ms: int, until_ms: int, limit: int) -> list[int]:
        """The slots in (``after_ms``, ``until_ms``], oldest first, at most ``limit``."""
        ...


class IntervalSlots:
    def __init__(self, every_ms: int) -> None:
        self.every = every_ms

    def latest(self, until_ms: int) -> int:
        return until_ms // self.every * self.every

    def after(self, after_ms: int, until_ms: int, limit: int) -> list[int]:
        first = (after_ms // self.every + 1) * self.every
        return list(range(first, until_ms + 1, self.every))[:limit]


class CronSlots:
    def __init__(self, expression: str, timezone: str) -> None:
        require_extra("cron", "a schedule written as cron")
        from croniter import croniter

        self._croniter: Any = croniter
        self.expression, self.zone = expression, ZoneInfo(timezone)

    def _at(self, ms: int) -> datetime:
        return datetime.fromtimestamp(ms / 1000, UTC).astimezone(self.zone)

    def latest(self, until_ms: int) -> int:
        # get_prev is strictly before: start 1 ms after, so a slot at until_ms counts.
        it = self._croniter(self.expression, self._at(until_ms + 1))
        return int(it.get_prev(datetime).timestamp() * 1000)

    def after(self, after_ms: int, until_ms: int, limit: int) -> list[int]:
        it = self._croniter(self.expression, self._at(after_ms))
        out: list[int] = []
        while len(out) < limit:
            slot = int(it.get_next(datetime).timestamp() * 1000)
            if slot > until_ms:
                break
            out.append(slot)
        return out


def check_cron(expression: str, timezone: str) -> None:
    """Raise ValueError naming what is wrong with a cron expression or its time zone."""
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {timezone!r} (an IANA name: Europe/Paris)") from None
    require_extra("cron", "a schedule written as cron")
    from croniter import croniter

    if len(expression.split()) != 5 or not croniter.is_valid(expression):
        raise ValueError(
            f"{expression!r} is not a cron expression of five fields (minute hour day "
            "month weekday, e.g. '0 9 * * 1-5')"
        )
