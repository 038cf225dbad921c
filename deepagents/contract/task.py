"""The Task: what an upstream service asks an agent to do."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic import AwareDatetime as PydanticAwareDatetime

from deepagents._internal.ids import uuid7_str

SCHEMA_VERSION = 1

INTENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
# Agent names become part of Redis keys, inside a hash tag: no braces, colons or spaces.
AGENT_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


def new_task_id() -> str:
    """A UUIDv7 string: unique and ordered by creation time. The generator the audit
    event ids use (``_internal/ids.py``): uuid6's drew fresh random bits per id, most of
    what validating a Task built without an id cost; 5% fewer instructions per
    ``Orchestrator.submit``, paired under callgrind (``docs/benchmarks.md``, issue 23)."""
    return uuid7_str()


def utcnow() -> datetime:
    return datetime.now(UTC)


def _check_aware(value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        raise ValueError("must be timezone-aware (for example 2026-01-01T00:00:00Z)")
    return value


AwareDatetime = Annotated[datetime, AfterValidator(_check_aware)]
# Checked in pydantic-core (Rust), not in Python: every task a worker reads is validated
# again, so the common fields use native constraints (their messages name the rule).
TASK_ID_PATTERN = r"^[A-Za-z0-9_.-]+$"


class Task(BaseModel):
    """An immutable unit of work. ``task_id`` is generated (UUIDv7) when absent."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str = Field(
        default_factory=new_task_id, min_length=1, max_length=64, pattern=TASK_ID_PATTERN
    )
    intent: str = Field(pattern=INTENT_RE.pattern)
    payload: dict[str, Any] = Field(default_factory=dict)
    deadline: AwareDatetime | None = None
    # Run no earlier than this: the task waits in its shard's delayed set (state scheduled).
    not_before: AwareDatetime | None = None
    priority: int | None = Field(default=None, ge=0, le=9, description="tier hint: 0 = p0")
    tenant: str | None = Field(default=None, min_length=1, max_length=128)
    # In a tier with fair_share: the queue this task shares the tier through (default:
    # its tenant), and that queue's weight against the others' (default 1).
    fairness_key: str | None = Field(default=None, min_length=1, max_length=256)
    fairness_weight: float | None = Field(default=None, gt=0, le=1000)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=256)
    traceparent: str | None = Field(default=None, max_length=256)
    # A child task (``ctx.delegate``): its parent's id, and how many parents are above it
    # (None: a task submitted from outside, depth 0; left out of the JSON then).
    parent_id: str | None = Field(
        default=None, min_length=1, max_length=64, pattern=TASK_ID_PATTERN
    )
    depth: int | None = Field(default=None, ge=1, le=64)
    schema_version: int = SCHEMA_VERSION
    created_at: PydanticAwareDatetime = Field(default_factory=utcnow)

    def expired(self, now: datetime | None = None) -> bool:
        return self.deadline is not None and self.deadline <= (now or utcnow())
