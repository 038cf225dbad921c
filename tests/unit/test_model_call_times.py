"""Model-call audit events carry the time their attempt started, not the time they were
flushed (issue 38): a task's calls keep their order and their place between its steps."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from deepagents.modelcall.record import AttemptRecord
from deepagents.modelcall.usage import UsageLedger


def _attempt(started_at: float) -> AttemptRecord:
    return AttemptRecord("sim", 1, "ok", "sha256:x", started_at=started_at)


def test_each_model_call_event_is_stamped_when_its_attempt_started() -> None:
    ledger = UsageLedger()
    now = time.monotonic()
    ledger.add("sim", (_attempt(now - 5.0),), degraded=False)
    ledger.add("sim", (_attempt(now - 3.0), _attempt(now - 1.0)), degraded=False)
    flushed = datetime.now(UTC)
    stamps = [e.ts for e in ledger.audit_events("t1")]
    assert all(isinstance(ts, datetime) for ts in stamps)
    ago = [(flushed - ts).total_seconds() for ts in stamps if isinstance(ts, datetime)]
    # Seconds before the flush, in the order they ran (a scheduling hiccup aside: 0.5 s).
    assert [round(a) for a in ago] == [5, 3, 1], ago
    assert stamps == sorted(stamps) and len(set(stamps)) == 3


def test_a_refusal_recorded_without_a_start_keeps_the_flush_time() -> None:
    ledger = UsageLedger()
    ledger.add("sim", (_attempt(0.0),), degraded=False)
    (event,) = ledger.audit_events("t1")
    assert isinstance(event.ts, datetime)
    assert datetime.now(UTC) - event.ts < timedelta(minutes=1)
