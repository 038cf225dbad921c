"""The ``rollouts`` section: an agent's stable and canary versions, the canary's share of new
tasks, and the controller's thresholds (docs/rollouts.md)."""

from __future__ import annotations

import re
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# A version becomes part of a Redis key (its streams): no braces, colons or spaces.
VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$"
VERSION_RE = re.compile(VERSION_PATTERN)


class StickyBy(StrEnum):
    TASK = "task"  # each task on its own (by task_id)
    TENANT = "tenant"  # every task of one tenant on one version (no tenant: by task_id)


def check_version(value: str) -> str:
    if not VERSION_RE.match(value):
        raise ValueError(f"version {value!r} must match {VERSION_PATTERN}")
    return value


class RolloutConfig(BaseModel):
    """One agent's rollout. ``weight`` is the canary's share of new tasks (0..1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stable: str
    canary: str | None = None
    weight: float = Field(default=0.1, ge=0.0, le=1.0)
    sticky_by: StickyBy = StickyBy.TASK
    # The controller: promotion steps (weights), held ``step_s`` each while healthy.
    steps: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0)
    step_s: float = Field(default=300.0, gt=0)
    window_s: float = Field(default=300.0, gt=0, le=86_400)
    min_samples: int = Field(default=100, ge=1)
    max_error_ratio: float = Field(default=2.0, gt=0)
    # Stable's error rate is taken as at least this when compared: 0 errors on stable
    # must not make one canary error a rollback.
    min_error_rate: float = Field(default=0.01, ge=0, le=1)
    max_p95_ratio: float = Field(default=1.5, gt=0)
    for_s: float = Field(default=300.0, ge=0)
    auto: bool = True  # false: the controller reports and audits, never acts

    @field_validator("stable", "canary")
    @classmethod
    def _version(cls, value: str | None) -> str | None:
        return None if value is None else check_version(value)

    @model_validator(mode="after")
    def _consistent(self) -> RolloutConfig:
        if self.canary is not None and self.canary == self.stable:
            raise ValueError("canary and stable are the same version")
        if not self.steps or any(not 0 < s <= 1 for s in self.steps):
            raise ValueError("steps must be weights in (0, 1]")
        if list(self.steps) != sorted(set(self.steps)):
            raise ValueError("steps must increase")
        if self.steps[-1] != 1.0:
            raise ValueError("the last step must be 1.0 (the canary takes everything)")
        return self
