"""Retry decisions as pure functions; the worker only applies them."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from pydantic import ValidationError

from deepagents.config.schema import RetryPolicy
from deepagents.errors import (
    DeepAgentsError,
    ErrorCode,
    InvalidInput,
    InvalidResult,
    RetryableError,
    StepError,
)


def backoff_ms(policy: RetryPolicy, attempt: int, rng: random.Random | None = None) -> int:
    """Capped exponential backoff with equal jitter: half fixed, half random."""
    ceiling = min(policy.max_ms, policy.base_ms * policy.multiplier ** max(0, attempt - 1))
    if not policy.jitter:
        return int(ceiling)
    half = ceiling / 2
    return int(half + (rng or random).uniform(0, half))


@dataclass(frozen=True, slots=True)
class Decision:
    action: str  # "retry" | "wait" (not counted: same attempt) | "fail" | "dead_letter"
    code: ErrorCode
    reason: str
    delay_ms: int = 0


def decide(
    exc: BaseException,
    *,
    deliveries: int,
    max_deliveries: int,
    policy: RetryPolicy,
    time_left_ms: float | None,
    rng: random.Random | None = None,
) -> Decision:
    """What to do with a task whose contract raised ``exc`` on its ``deliveries``-th run."""
    message = f"{type(exc).__name__}: {exc}"[:2000]
    if isinstance(exc, InvalidInput | ValidationError):
        return Decision("fail", ErrorCode.INVALID_INPUT, message)
    retryable = exc.retryable if isinstance(exc, DeepAgentsError) else True
    code = exc.code if isinstance(exc, DeepAgentsError) else ErrorCode.AGENT_ERROR
    if isinstance(exc, InvalidResult) or (isinstance(exc, StepError) and exc.dead_letter):
        return Decision("dead_letter", code, message)  # would fail the same way each time
    if not retryable:
        return Decision("fail", code, message)
    if isinstance(exc, RetryableError) and not exc.counted:
        return _wait(exc, code, message, time_left_ms)
    if deliveries >= max_deliveries:
        return Decision(
            "dead_letter", ErrorCode.MAX_DELIVERIES, f"failed {deliveries} times; last: {message}"
        )
    # A service's Retry-After is a floor under the backoff, never shortened by jitter.
    floor_ms = math.ceil(getattr(exc, "retry_after_s", 0.0) * 1000)
    delay = max(backoff_ms(policy, deliveries, rng), floor_ms)
    if time_left_ms is not None and delay >= time_left_ms:
        return Decision(
            "fail", ErrorCode.DEADLINE_EXCEEDED, f"no time left to retry; last: {message}"
        )
    return Decision("retry", code, message, delay)


def _wait(
    exc: RetryableError, code: ErrorCode, message: str, time_left_ms: float | None
) -> Decision:
    """Nothing was tried (an open circuit): wait as long as it says, no backoff (that grows
    per failed delivery), and no later than the deadline."""
    delay = max(1, math.ceil(exc.retry_after_s * 1000))
    if time_left_ms is not None and delay >= time_left_ms:
        return Decision(
            "fail", ErrorCode.DEADLINE_EXCEEDED, f"no time left to wait; last: {message}"
        )
    return Decision("wait", code, message, delay)
