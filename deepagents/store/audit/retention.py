"""Periodic upkeep by the writer: partitions created ahead, old ones dropped (retention)."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta

from deepagents.store.audit.errors import AuditUnavailable
from deepagents.store.audit.migrate import (
    DAYS_AHEAD,
    day_range,
    drop_partitions_before,
    ensure_partitions,
)
from deepagents.store.audit.sink import PgSink

log = logging.getLogger("deepagents.audit")
INTERVAL_S = 3_600.0


class Maintenance:
    def __init__(self, retention_days: int | None, interval_s: float = INTERVAL_S) -> None:
        self.retention_days = retention_days
        self.interval_s = interval_s
        self._next = time.monotonic() + interval_s  # migrate already did the first round

    def due(self) -> bool:
        return time.monotonic() >= self._next

    async def run(self, sink: PgSink) -> list[str]:
        """One round; a failure is logged and retried at the next interval."""
        self._next = time.monotonic() + self.interval_s
        try:
            return await self._round(sink)
        except (AuditUnavailable, OSError) as exc:
            log.warning("audit maintenance skipped (next in %.0f s): %s", self.interval_s, exc)
            return []

    async def _round(self, sink: PgSink) -> list[str]:
        today = datetime.now(UTC).date()
        async with sink.session() as conn:
            await ensure_partitions(conn, day_range(today, today + timedelta(days=DAYS_AHEAD)))
            if self.retention_days is None:
                return []
            dropped = await drop_partitions_before(
                conn, today - timedelta(days=self.retention_days)
            )
        if dropped:
            log.info("audit retention dropped partitions %s", ", ".join(dropped))
        return dropped
