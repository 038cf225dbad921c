"""Retry decisions as pure functions; the worker only applies them."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from pydantic import ValidationError

from deepagents.config.schema import AgentSettings, RetryPolicy
from deepagents.contract.agent import AgentContract
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
class ErrorRules:
    """Which exception types are never retried and which always are, by name: bare
    (``KeyError``) or with its module (``billing.errors.Declined``). The YAML names them;
    an agent class's types are named here the same way (``for_agent``)."""

    never: frozenset[str] = frozenset()
    always: frozenset[str] = frozenset()

    @classmethod
    def for_agent(
        cls, settings: AgentSettings, agent: type[AgentContract] | AgentContract
    ) -> ErrorRules:
        return cls(
            never=frozenset(settings.non_retryable) | _names(agent.non_retryable),
            always=frozenset(settings.always_retry) | _names(agent.always_retry),
        )

    def retryable(self, exc: BaseException) -> bool | None:
        """True or False when a rule names the failure's class or a base of it (the most
        specific one decides); None when none does (the defaults apply)."""
        if not (self.never or self.always):
            return None
        for klass in type(exc).__mro__:
            names = (klass.__name__, f"{klass.__module__}.{klass.__qualname__}")
            if any(name in self.never for name in names):
                return False
            if any(name in self.always for name in names):
                return True
        return None


NO_RULES = ErrorRules()


def _names(types: tuple[type[BaseException], ...]) -> frozenset[str]:
    return frozenset(f"{t.__module__}.{t.__qualname__}" for t in types)


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
    rules: ErrorRules = NO_RULES,
) -> Decision:
    """What to do with a task whose contract raised ``exc`` on its ``deliveries``-th run.
    The agent's ``rules`` come after the runtime's own verdicts (invalid input, a broken
    contract) and before each exception's default (``docs/retries.md``)."""
    message = f"{type(exc).__name__}: {exc}"[:2000]
    if isinstance(exc, InvalidInput | ValidationError):
        return Decision("fail", ErrorCode.INVALID_INPUT, message)
    code = exc.code if isinstance(exc, DeepAgentsError) else ErrorCode.AGENT_ERROR
    if isinstance(exc, InvalidResult) or (isinstance(exc, StepError) and exc.dead_letter):
        return Decision("dead_letter", code, message)  # would fail the same way each time
    retryable = rules.retryable(exc)
    if retryable is None:
        retryable = exc.retryable if isinstance(exc, DeepAgentsError) else True
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
