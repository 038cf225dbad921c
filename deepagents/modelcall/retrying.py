"""What retrying can change: classification of provider errors and the retry decision.

``classify`` and ``should_retry`` are pure (unit-tested with tables); ``retrying`` only wires
the decision into tenacity. Every ``AsyncRetrying`` here has an explicit stop and wait:
tenacity's default is to retry forever without waiting.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from enum import StrEnum
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, stop_after_attempt

from deepagents.config.models import RetryConfig
from deepagents.contract.task import utcnow
from deepagents.errors import DeepAgentsError, ErrorCode


class ErrorKind(StrEnum):
    TRANSIENT = "transient"  # 5xx, 529 overloaded, timeouts, connection errors: retried
    RATE_LIMITED = "rate_limited"  # 429 that passes with time: retried after Retry-After
    AUTH = "auth"  # 401: one credential refresh, then one retry
    SPEND_LIMIT = "spend_limit"  # 429 quota/billing: waiting does not help
    CONTEXT_LENGTH = "context_length"
    CONTENT_FILTER = "content_filter"
    INVALID = "invalid"  # any other 4xx
    RESPONSE_TOO_LARGE = "response_too_large"  # over a size cap: the attempt is aborted
    BAD_TOOL_CALL = "bad_tool_call"  # a tool call the model made up wrong: asked again


RETRYABLE = frozenset({ErrorKind.TRANSIENT, ErrorKind.RATE_LIMITED, ErrorKind.BAD_TOOL_CALL})

# Provider error codes (OpenAI, Anthropic, Azure, vLLM gateways) that change the class of a 4xx.
_SPEND_CODES = frozenset(
    {
        "insufficient_quota",
        "enforced_spend_limit_reached",
        "billing_hard_limit_reached",
        "quota_exceeded",
        "billing_not_active",
    }
)
_CONTEXT_CODES = frozenset({"context_length_exceeded", "string_above_max_length"})
_FILTER_CODES = frozenset({"content_filter", "content_policy_violation", "content_filtered"})


class ProviderError(DeepAgentsError):
    """A failed attempt, already classified. Carries no prompt and no key."""

    code = ErrorCode.MODEL_UNAVAILABLE

    def __init__(
        self,
        kind: ErrorKind,
        detail: str,
        *,
        status: int | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(f"{kind.value}: {detail}" + (f" (HTTP {status})" if status else ""))
        self.kind = kind
        self.retryable = kind in RETRYABLE
        self.detail = detail
        self.status = status
        self.retry_after_s = retry_after_s
        self.request_id: str | None = None
        self.timing: dict[str, float | None] = {}
        self.partial_tokens = 0  # tokens streamed before a stream broke (providers bill them)


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait, from ``retry-after-ms``, ``retry-after`` (seconds or an HTTP date)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - utcnow()).total_seconds())


def _error_code(body: Any) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return ""
    details = error.get("details")
    nested = details.get("error_code") if isinstance(details, dict) else None
    return str(nested or error.get("code") or error.get("type") or "")


# What says the server is not there at all (httpx's names for a refused, reset or dropped
# connection), as 502, 503 and 504 say it of a gateway in front of it: the breaker's streak.
_UNREACHABLE_NAMES = frozenset(
    {"ConnectError", "ReadError", "WriteError", "CloseError", "NetworkError", "RemoteProtocolError"}
)
_GATEWAY_DOWN = frozenset({502, 503, 504})


def unreachable(error: ProviderError) -> bool:
    """The attempt found no server: it feeds the breaker's streak (``store.breaker``)."""
    if error.kind is not ErrorKind.TRANSIENT:
        return False
    if error.status is not None:
        return error.status in _GATEWAY_DOWN
    return error.detail in _UNREACHABLE_NAMES


def classify(status: int, body: Any) -> ErrorKind:
    """The class of an HTTP error answer, from its status and its JSON body's error code."""
    code = _error_code(body).lower()
    if status == 429:
        return ErrorKind.SPEND_LIMIT if code in _SPEND_CODES else ErrorKind.RATE_LIMITED
    if status == 401:
        return ErrorKind.AUTH
    if status in (408, 409) or status >= 500:
        return ErrorKind.TRANSIENT
    if code in _CONTEXT_CODES:
        return ErrorKind.CONTEXT_LENGTH
    if code in _FILTER_CODES:
        return ErrorKind.CONTENT_FILTER
    return ErrorKind.INVALID


@dataclass(frozen=True, slots=True)
class Decision:
    retry: bool
    delay_s: float = 0.0
    reason: str = ""


def backoff_s(policy: RetryConfig, retry_number: int, rand: Callable[[], float]) -> float:
    """Exponential backoff with equal jitter: within [b/2, b], b = min(cap, base * 2**(n-1))."""
    ceiling = min(policy.max_backoff_s, policy.base_s * 2.0 ** max(0, retry_number - 1))
    return ceiling / 2 + rand() * ceiling / 2


def should_retry(
    error: BaseException,
    retries_done: int,
    policy: RetryConfig,
    *,
    time_left_s: float,
    min_attempt_s: float = 0.0,
    rand: Callable[[], float] = random.random,
) -> Decision:
    """Whether to try again after ``error``, and after how long. Pure."""
    if not isinstance(error, ProviderError):
        return Decision(False, reason="not_a_provider_error")
    if error.kind is ErrorKind.AUTH and error.detail == "credential_refreshed":
        # The one retry a 401 earns, at once: the key changed, waiting changes nothing.
        return _fits(Decision(True, 0.0, "auth_refreshed"), time_left_s, min_attempt_s)
    too_large_retried = error.kind is ErrorKind.RESPONSE_TOO_LARGE and policy.response_too_large
    if error.kind not in RETRYABLE and not too_large_retried:
        return Decision(False, reason=f"not_retryable:{error.kind.value}")
    if retries_done >= policy.max_retries:
        return Decision(False, reason="retries_exhausted")
    delay = backoff_s(policy, retries_done + 1, rand)
    if error.retry_after_s is not None:
        if error.retry_after_s > policy.max_retry_after_s:
            return Decision(False, reason="retry_after_too_long")
        # Never earlier than the server asked; a little jitter after it spreads the herd.
        delay = error.retry_after_s + rand() * policy.base_s
    return _fits(Decision(True, delay, "retry"), time_left_s, min_attempt_s)


def _fits(decision: Decision, time_left_s: float, min_attempt_s: float) -> Decision:
    """No retry that cannot finish before the deadline."""
    if decision.delay_s + max(min_attempt_s, 0.001) >= time_left_s:
        return Decision(False, reason="deadline")
    return decision


def retrying(
    policy: RetryConfig,
    *,
    time_left_s: Callable[[], float],
    min_attempt_s: float,
    on_decision: Callable[[Decision], None],
    rand: Callable[[], float] = random.random,
) -> AsyncRetrying:
    """Tenacity applying :func:`should_retry`; re-raises the last error when it says stop."""
    decisions: dict[int, Decision] = {}

    def _retry(state: RetryCallState) -> bool:
        if state.outcome is None or not state.outcome.failed:
            return False
        error = state.outcome.exception()
        assert error is not None
        decision = should_retry(
            error,
            state.attempt_number - 1,
            policy,
            time_left_s=time_left_s(),
            min_attempt_s=min_attempt_s,
            rand=rand,
        )
        decisions[state.attempt_number] = decision
        on_decision(decision)
        return decision.retry

    def _wait(state: RetryCallState) -> float:
        return decisions[state.attempt_number].delay_s

    # One extra attempt for the retry a 401 refresh earns; should_retry caps the rest.
    return AsyncRetrying(
        retry=_retry, wait=_wait, stop=stop_after_attempt(policy.max_retries + 2), reraise=True
    )
