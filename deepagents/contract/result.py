"""The Result: what an agent answers, with the runtime's bookkeeping filled in."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

from deepagents.errors import ErrorCode as ErrorCode  # re-exported: defined with the errors


class ResultStatus(StrEnum):
    SUCCESS = "success"  # the agent did what was asked
    PARTIAL = "partial"  # some of it; output says what
    FAILED = "failed"  # nothing usable; error says why


class ErrorInfo(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # An ErrorCode when deepagents writes it; read as a plain string, so a result written
    # by a newer version with a code this one lacks still decodes.
    code: str
    message: str = ""


class ResultMetrics(BaseModel):
    """Runtime metrics; agents may add their own keys (for example ``risk_score``)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    latency_ms: float | None = None
    queue_ms: float | None = None
    tokens_used: int = 0
    cost_usd: float = 0.0
    attempts: int = 1


NO_METRICS = ResultMetrics()


class Result(BaseModel):
    """An agent's answer. ``execute`` may leave the ids out: the runtime fills them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str | None = None
    status: ResultStatus = ResultStatus.SUCCESS
    output: Any = None
    error: ErrorInfo | None = None
    degraded: bool = False
    # One shared instance (frozen): a default built per Result costs a second validation.
    metrics: ResultMetrics = NO_METRICS
    agent: str | None = None
    agent_version: str | None = None
    finished_at: datetime | None = None

    @classmethod
    def failed(cls, code: ErrorCode, message: str = "", **kwargs: Any) -> Result:
        return cls(
            status=ResultStatus.FAILED, error=ErrorInfo(code=code, message=message), **kwargs
        )

    @property
    def ok(self) -> bool:
        return self.status is ResultStatus.SUCCESS
