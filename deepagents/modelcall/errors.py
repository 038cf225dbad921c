"""Errors of the model-call layer, classified by what retrying can change::

DeepAgentsError
└── ModelCallError                 code, retryable, the attempt records so far
    ├── InputTooLong               over the context limit; failed fast, no call (invalid_input)
    ├── ModelRequestRejected       the provider said no for good: never retried
    │   ├── ContextLengthExceeded
    │   ├── ContentFiltered
    │   ├── InvalidRequest         other 4xx (400, 403, 404, 422, ...)
    │   ├── SpendLimitReached      429 that waiting cannot fix (quota, billing)
    │   └── AuthenticationFailed   401 again after one credential refresh
    ├── ModelUnavailable           gates refused or retries exhausted (retryable later)
    │   └── ResponseTooLarge       an answer over a size cap (response_too_large)
    ├── ModelDeadlineExceeded      no time left for an attempt (deadline_exceeded)
    └── CredentialError            no key: Vault/env missing or refused (fail closed)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deepagents.errors import DeepAgentsError, ErrorCode

if TYPE_CHECKING:
    from deepagents.modelcall.record import AttemptRecord


class ModelCallError(DeepAgentsError):
    """A model call did not produce an answer."""

    code = ErrorCode.MODEL_UNAVAILABLE

    def __init__(self, message: str | None = None, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or self.code
        self.attempts: tuple[AttemptRecord, ...] = ()


class InputTooLong(ModelCallError):
    """The input does not fit the model's context limit."""

    code = ErrorCode.INVALID_INPUT


class ModelRequestRejected(ModelCallError):
    """The provider rejected the request; retrying cannot change that."""

    code = ErrorCode.INVALID_INPUT


class ContextLengthExceeded(ModelRequestRejected):
    """The provider says the request exceeds the model's context length."""


class ContentFiltered(ModelRequestRejected):
    """The provider's content filter refused the request."""


class InvalidRequest(ModelRequestRejected):
    """The provider refused the request as invalid."""


class SpendLimitReached(ModelRequestRejected):
    """The provider's quota or spend limit is exhausted; waiting does not help."""

    code = ErrorCode.MODEL_UNAVAILABLE


class AuthenticationFailed(ModelRequestRejected):
    """The provider refused the credential, even after one refresh."""

    code = ErrorCode.MODEL_UNAVAILABLE


class ModelUnavailable(ModelCallError):
    """No model in the chain answered (gates refused or retries were exhausted)."""

    code = ErrorCode.MODEL_UNAVAILABLE
    retryable = True


class ResponseTooLarge(ModelUnavailable):
    """The answer passed a size cap (body, stream line or error body); nothing was kept."""

    code = ErrorCode.RESPONSE_TOO_LARGE
    retryable = False  # the same request would likely bring the same answer


class ModelDeadlineExceeded(ModelCallError):
    """Not enough time is left before the deadline for an attempt."""

    code = ErrorCode.DEADLINE_EXCEEDED


class CredentialError(ModelCallError):
    """No usable API key (Vault or the environment failed); fail closed."""

    code = ErrorCode.MODEL_UNAVAILABLE
