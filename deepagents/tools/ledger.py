"""The ``tool_call`` audit events of the task being run, collected as ``UsageLedger``
collects model calls': the worker starts a ledger per delivery and sends its events to the
outbox with the delivery's own. Only the tool, its server, a hash of the arguments, the
outcome, the error code and timings: never an argument's or a result's value."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from deepagents.contract.events import AuditEvent

_ledger: ContextVar[ToolLedger | None] = ContextVar("deepagents_tool_ledger", default=None)


@dataclass
class ToolLedger:
    calls: list[dict[str, Any]] = field(default_factory=list)

    def add(self, **fields: Any) -> None:
        self.calls.append(fields)

    def audit_events(self, task_id: str | None) -> list[AuditEvent]:
        """The events, once: a delivery that parks and one that ends each send them."""
        calls, self.calls = self.calls, []
        return [AuditEvent.of("tool_call", task_id, **fields) for fields in calls]


def start_tool_ledger() -> ToolLedger:
    """A fresh ledger for the current context (the delivery's own asyncio task)."""
    ledger = ToolLedger()
    _ledger.set(ledger)
    return ledger


def current_tool_ledger() -> ToolLedger | None:
    return _ledger.get()
