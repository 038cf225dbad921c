"""Context for the task being run: which ``ModelCalls`` to use and where usage adds up.

The worker (or a test, or the agent itself) opens a ``usage_scope()`` around a task; every
``wrap_model_call`` inside it adds its reply there, so the runtime can fill
``Result.metrics`` (tokens_used, cost_usd), ``Result.degraded`` and the ``model_call`` audit
events without the agent passing anything back.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from deepagents.contract.events import AuditEvent
from deepagents.contract.result import Result, ResultMetrics
from deepagents.modelcall.record import AttemptRecord

if TYPE_CHECKING:
    from deepagents.modelcall.calls import ModelCalls

_calls: ContextVar[ModelCalls | None] = ContextVar("deepagents_model_calls", default=None)
_ledger: ContextVar[UsageLedger | None] = ContextVar("deepagents_model_usage", default=None)


@dataclass
class UsageLedger:
    """Model usage of one task: every attempt, and whether any answer was degraded."""

    attempts: list[AttemptRecord] = field(default_factory=list)
    requested: list[str] = field(default_factory=list)
    degraded: bool = False
    # Usage of steps an earlier delivery ran and recorded: in the task's totals, not in its
    # audit events (that delivery wrote their model_call events).
    carried_tokens: int = 0
    carried_cost_usd: float = 0.0
    # Of this delivery's attempts, those of steps whose records (with their usage) landed:
    # a later delivery replays those, so a retry hands on only the rest (``unrecorded``).
    recorded_tokens: int = 0
    recorded_cost_usd: float = 0.0

    def add(
        self, requested_model: str, attempts: tuple[AttemptRecord, ...], degraded: bool
    ) -> None:
        self.attempts.extend(attempts)
        self.requested.extend(requested_model for _ in attempts)
        self.degraded = self.degraded or degraded

    def add_ledger(self, other: UsageLedger) -> None:
        """Another ledger's usage (a step's own, kept apart to price the step) into this one."""
        self.attempts.extend(other.attempts)
        self.requested.extend(other.requested)
        self.degraded = self.degraded or other.degraded

    def recorded(self, step: UsageLedger) -> None:
        """A step's usage (already in this ledger, ``add_ledger``) landed in its record."""
        self.recorded_tokens += sum(a.tokens_in + a.tokens_out for a in step.attempts)
        self.recorded_cost_usd += sum(a.cost_usd for a in step.attempts)

    def unrecorded(self) -> tuple[int, float]:
        """This delivery's spend that no step record holds: what a retry hands on to the
        task's next delivery (tokens, cost in USD)."""
        tokens = sum(a.tokens_in + a.tokens_out for a in self.attempts) - self.recorded_tokens
        cost = sum(a.cost_usd for a in self.attempts) - self.recorded_cost_usd
        return max(0, tokens), max(0.0, round(cost, 6))

    def carry(self, tokens: int, cost_usd: float, degraded: bool) -> None:
        """A recorded step's usage, replayed rather than run again."""
        self.carried_tokens += tokens
        self.carried_cost_usd += cost_usd
        self.degraded = self.degraded or degraded

    @property
    def counted(self) -> bool:
        """Anything for the Result: an attempt in this delivery, or a replayed step's."""
        return bool(self.attempts or self.degraded or self.carried_tokens or self.carried_cost_usd)

    @property
    def tokens_used(self) -> int:
        return self.carried_tokens + sum(a.tokens_in + a.tokens_out for a in self.attempts)

    @property
    def cost_usd(self) -> float:
        return round(self.carried_cost_usd + sum(a.cost_usd for a in self.attempts), 6)

    def audit_events(self, task_id: str | None) -> list[AuditEvent]:
        """One ``model_call`` event per attempt, each at the time its attempt started (its
        monotonic start put on the wall clock), not the time the events are flushed: a
        task's calls keep their order and their place between its steps."""
        to_wall = time.time() - time.monotonic()  # the event loop's clock is monotonic
        return [
            AuditEvent.of(
                "model_call",
                task_id,
                # 0: a refusal recorded without a start (stamped now)
                ts=datetime.fromtimestamp(a.started_at + to_wall, UTC) if a.started_at else None,
                requested_model=req,
                **a.as_event_fields(),
            )
            for req, a in zip(self.requested, self.attempts, strict=True)
        ]

    def apply(self, result: Result) -> Result:
        """``result`` with this task's model tokens and cost, and degraded if any answer was."""
        metrics = result.metrics.model_dump()
        metrics["tokens_used"] = max(metrics.get("tokens_used", 0), self.tokens_used)
        metrics["cost_usd"] = max(metrics.get("cost_usd", 0.0), self.cost_usd)
        return result.model_copy(
            update={
                "metrics": ResultMetrics.model_validate(metrics),
                "degraded": result.degraded or self.degraded,
            }
        )


@contextlib.contextmanager
def usage_scope() -> Iterator[UsageLedger]:
    ledger = UsageLedger()
    token = _ledger.set(ledger)
    try:
        yield ledger
    finally:
        _ledger.reset(token)


def start_usage() -> UsageLedger:
    """A fresh ledger for the current context, not reset after: for a context that ends
    with its work (an asyncio task of its own), where ``usage_scope`` costs more."""
    ledger = UsageLedger()
    _ledger.set(ledger)
    return ledger


def current_usage() -> UsageLedger | None:
    return _ledger.get()


@contextlib.contextmanager
def use_model_calls(calls: ModelCalls) -> Iterator[ModelCalls]:
    """Make ``calls`` the one ``wrap_model_call`` uses in this context (set per loop)."""
    token = _calls.set(calls)
    try:
        yield calls
    finally:
        _calls.reset(token)


def current_model_calls() -> ModelCalls | None:
    return _calls.get()
