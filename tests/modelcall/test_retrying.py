"""The pure retry decisions: classification table, backoff bounds, Retry-After, deadline."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from datetime import timedelta
from email.utils import format_datetime

import httpx
import pytest

from deepagents.config.models import RetryConfig
from deepagents.contract.task import utcnow
from deepagents.modelcall.providers.http import map_httpx_error
from deepagents.modelcall.retrying import (
    ErrorKind,
    ProviderError,
    backoff_s,
    classify,
    parse_retry_after,
    should_retry,
)


def _err(code: str) -> dict[str, object]:
    return {"error": {"message": "x", "type": "x", "code": code}}


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (500, None, ErrorKind.TRANSIENT),
        (502, None, ErrorKind.TRANSIENT),
        (503, _err("overloaded"), ErrorKind.TRANSIENT),
        (529, {"type": "error", "error": {"type": "overloaded_error"}}, ErrorKind.TRANSIENT),
        (408, None, ErrorKind.TRANSIENT),
        (429, _err("rate_limit_exceeded"), ErrorKind.RATE_LIMITED),
        (429, None, ErrorKind.RATE_LIMITED),
        (429, _err("insufficient_quota"), ErrorKind.SPEND_LIMIT),
        (
            429,
            {
                "error": {
                    "type": "rate_limit_error",
                    "details": {"error_code": "enforced_spend_limit_reached"},
                }
            },
            ErrorKind.SPEND_LIMIT,
        ),
        (401, _err("invalid_api_key"), ErrorKind.AUTH),
        (400, _err("context_length_exceeded"), ErrorKind.CONTEXT_LENGTH),
        (400, _err("content_filter"), ErrorKind.CONTENT_FILTER),
        (400, _err("content_policy_violation"), ErrorKind.CONTENT_FILTER),
        (400, _err("invalid_request_error"), ErrorKind.INVALID),
        (403, None, ErrorKind.INVALID),
        (404, None, ErrorKind.INVALID),
        (422, None, ErrorKind.INVALID),
    ],
)
def test_classify(status: int, body: object, kind: ErrorKind) -> None:
    assert classify(status, body) is kind


POLICY = RetryConfig(max_retries=3, base_s=0.1, max_backoff_s=5.0, max_retry_after_s=30)


def _always(value: float) -> Callable[[], float]:
    """A random source that always draws ``value``."""
    return lambda: value


@pytest.mark.parametrize(
    "kind",
    [
        ErrorKind.CONTEXT_LENGTH,
        ErrorKind.CONTENT_FILTER,
        ErrorKind.INVALID,
        ErrorKind.SPEND_LIMIT,
        ErrorKind.AUTH,
    ],
)
def test_never_retried(kind: ErrorKind) -> None:
    decision = should_retry(ProviderError(kind, "x"), 0, POLICY, time_left_s=100)
    assert not decision.retry


@pytest.mark.parametrize("retries_done", [0, 1, 2])
def test_transient_backoff_is_bounded(retries_done: int) -> None:
    ceiling = 0.1 * 2**retries_done
    for rand in (0.0, 0.5, 0.999):
        decision = should_retry(
            ProviderError(ErrorKind.TRANSIENT, "x"),
            retries_done,
            POLICY,
            time_left_s=100,
            rand=_always(rand),
        )
        assert decision.retry
        assert ceiling / 2 <= decision.delay_s <= ceiling


def test_retries_exhausted_after_max() -> None:
    decision = should_retry(ProviderError(ErrorKind.TRANSIENT, "x"), 3, POLICY, time_left_s=100)
    assert (decision.retry, decision.reason) == (False, "retries_exhausted")


def test_backoff_capped() -> None:
    assert backoff_s(POLICY, 30, lambda: 1.0) == 5.0


def test_retry_after_is_a_floor() -> None:
    error = ProviderError(ErrorKind.RATE_LIMITED, "x", status=429, retry_after_s=2.0)
    for rand in (0.0, 0.99):
        decision = should_retry(error, 0, POLICY, time_left_s=100, rand=_always(rand))
        assert decision.retry and 2.0 <= decision.delay_s <= 2.0 + POLICY.base_s


def test_retry_after_longer_than_allowed_gives_up() -> None:
    error = ProviderError(ErrorKind.RATE_LIMITED, "x", status=429, retry_after_s=31)
    assert should_retry(error, 0, POLICY, time_left_s=100).reason == "retry_after_too_long"


def test_no_retry_that_cannot_finish_before_the_deadline() -> None:
    error = ProviderError(ErrorKind.RATE_LIMITED, "x", status=429, retry_after_s=2.0)
    decision = should_retry(error, 0, POLICY, time_left_s=1.5)
    assert (decision.retry, decision.reason) == (False, "deadline")
    transient = ProviderError(ErrorKind.TRANSIENT, "x")
    assert not should_retry(transient, 0, POLICY, time_left_s=3, min_attempt_s=5).retry


def test_refreshed_401_retries_at_once() -> None:
    error = ProviderError(ErrorKind.AUTH, "credential_refreshed", status=401)
    decision = should_retry(error, 3, POLICY, time_left_s=10)
    assert decision.retry and decision.delay_s == 0


def test_parse_retry_after() -> None:
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None
    later = format_datetime(utcnow() + timedelta(seconds=30), usegmt=True)
    assert 25 <= (parse_retry_after({"retry-after": later}) or 0) <= 31


def _httpx_exceptions() -> list[type[Exception]]:
    return [
        obj
        for _, obj in inspect.getmembers(httpx, inspect.isclass)
        if issubclass(obj, Exception) and obj.__module__.startswith("httpx")
    ]


_NOT_TRANSIENT = {
    "CookieConflict", "InvalidURL", "LocalProtocolError", "UnsupportedProtocol", "TooManyRedirects",
    "StreamError", "RequestNotRead", "ResponseNotRead", "StreamClosed", "StreamConsumed",
}  # fmt: skip


@pytest.mark.parametrize("cls", _httpx_exceptions(), ids=lambda c: c.__name__)
def test_every_httpx_exception_is_mapped(cls: type[Exception]) -> None:
    if cls is httpx.HTTPStatusError:
        request = httpx.Request("POST", "http://127.0.0.1/")
        exc: Exception = cls(
            "SECRET-MSG", request=request, response=httpx.Response(503, request=request)
        )
    else:
        exc = cls.__new__(cls)  # constructors differ; the mapping looks only at the class
        Exception.__init__(exc, "SECRET-MSG")
    mapped = map_httpx_error(exc)
    # Misuse and bad configuration fail the same way again; everything else (timeouts,
    # network, the server's protocol, proxies, decoding, 503, and bases that may be any of
    # these) may pass, so it is retried.
    assert mapped.kind is (
        ErrorKind.INVALID if cls.__name__ in _NOT_TRANSIENT else ErrorKind.TRANSIENT
    )
    assert "SECRET-MSG" not in str(mapped)  # class names only: messages may hold URLs
