"""What a model call leaves behind: one record per attempt and the reply the caller gets.

The prompt itself is never stored: only its SHA-256 (or HMAC-SHA-256 when a key is set).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from deepagents.contract.events import audit_event
from deepagents.contract.result import Result, ResultMetrics


def prompt_digest(messages: Sequence[dict[str, Any]], key: bytes | None = None) -> str:
    """Hash of the canonical JSON of the messages; keyed (HMAC) when ``key`` is given."""
    data = orjson.dumps(list(messages), option=orjson.OPT_SORT_KEYS)
    if key:
        return "hmac-sha256:" + hmac.new(key, data, hashlib.sha256).hexdigest()
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One attempt against one model (or a refusal before any attempt, ``attempt=0``)."""

    model: str
    attempt: int
    outcome: str  # "ok", an error class ("transient", "rate_limited", ...) or a gate refusal
    prompt_sha256: str
    request_id: str | None = None
    status_code: int | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_estimated: bool = False
    model_version: str | None = None
    connect_ms: float | None = None
    first_token_ms: float | None = None
    total_ms: float | None = None
    cost_usd: float = 0.0
    retries: int = 0
    wait_before_s: float = 0.0
    started_at: float = 0.0  # monotonic, for tests and latency analysis
    detail: str | None = None  # provider error code or gate reason; never the prompt

    def as_event_fields(self) -> dict[str, Any]:
        fields = asdict(self)
        fields.pop("started_at")
        return fields


@dataclass(frozen=True, slots=True)
class ModelReply:
    """The answer of :func:`wrap_model_call` and everything that led to it."""

    text: str
    model: str | None  # which model answered; None when a declared fallback answered
    requested_model: str
    prompt_sha256: str
    degraded: bool = False
    reason: str | None = None  # why the answer is degraded (circuit_open, budget_exhausted, ...)
    attempts: tuple[AttemptRecord, ...] = field(default=())

    @property
    def tokens_in(self) -> int:
        return sum(a.tokens_in for a in self.attempts)

    @property
    def tokens_out(self) -> int:
        return sum(a.tokens_out for a in self.attempts)

    @property
    def tokens_used(self) -> int:
        return self.tokens_in + self.tokens_out

    @property
    def cost_usd(self) -> float:
        return round(sum(a.cost_usd for a in self.attempts), 6)

    @property
    def calls(self) -> int:
        """Requests that reached a provider (gate refusals are not calls)."""
        return sum(1 for a in self.attempts if a.attempt > 0)

    def metrics(self) -> dict[str, Any]:
        """Keys for ``Result.metrics``: the contract's two plus model-specific ones."""
        return {
            "tokens_used": self.tokens_used,
            "cost_usd": self.cost_usd,
            "model": self.model,
            "model_calls": self.calls,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
        }

    def audit_events(self, task_id: str | None) -> list[dict[str, Any]]:
        return [
            audit_event(
                "model_call", task_id, requested_model=self.requested_model, **a.as_event_fields()
            )
            for a in self.attempts
        ]

    def apply(self, result: Result) -> Result:
        """``result`` with this reply's tokens and cost added, and ``degraded`` if it was."""
        merged = result.metrics.model_dump()
        merged["tokens_used"] = merged.get("tokens_used", 0) + self.tokens_used
        merged["cost_usd"] = round(merged.get("cost_usd", 0.0) + self.cost_usd, 6)
        merged["model"] = self.model
        return result.model_copy(
            update={
                "metrics": ResultMetrics.model_validate(merged),
                "degraded": result.degraded or self.degraded,
            }
        )
