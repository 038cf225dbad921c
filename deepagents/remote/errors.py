"""HTTP answers of a remote agent as the errors that steer the worker's retry decision."""

from __future__ import annotations

import email.utils
import math
import re
import time
from collections.abc import Callable

import orjson

from deepagents.errors import (
    DeepAgentsError,
    ErrorCode,
    InvalidInput,
    RemoteProtocolError,
    RetryableError,
    TaskError,
)

SNIPPET_BYTES = 128
# Masks the worker's own secrets (its configured header values) in a service's text.
Mask = Callable[[str], str]
REDACTED = "[REDACTED]"
# What a service's stray error text most often leaks: "password=…", "token: …", a bearer
# token or an API key. The audit writer's redactor sees only keys, so the text is masked here.
_SECRETS = re.compile(
    r"(?i)((?:password|passwd|secret|token|api[_-]?key|authorization|cookie)[\"']?\s*[=:]\s*[\"']?)"
    r"(?:bearer\s+)?[^\s\"',;&}]+"
    r"|\bBearer\s+[A-Za-z0-9._~+/-]+=*|\bsk-[A-Za-z0-9_-]{8,}|\bAKIA[0-9A-Z]{16}\b"
)

# Where the service lives: URLs, ("host", port) tuples, [v6]:port, host:port and bare IPv4.
# Tenants read a task's error and anyone reads /health?full=true: the deployment's inner
# addresses are not theirs to learn. Operators have the URL in the config.
_ADDRESS = re.compile(
    r"\b[a-z][a-z0-9+.-]*://[^\s'\"]+"
    r"|\(\s*'[^']*'\s*,\s*\d+\s*\)"
    r"|\[[0-9A-Fa-f:.]+\](?::\d+)?"
    r"|\b(?:ipv[46]:)?(?:[A-Za-z0-9-]+\.)*[A-Za-z0-9-]+:\d{1,5}\b"
    r"|\b\d{1,3}(?:\.\d{1,3}){3}\b"
)
SERVICE = "<service>"


def hide_addresses(text: str) -> str:
    """``text`` with the service's URLs, hosts and ports replaced by ``<service>``."""
    return _ADDRESS.sub(SERVICE, text)


class RemoteRejected(TaskError):
    """The remote agent refused the request (a 4xx other than 400, 422 and 429)."""

    code = ErrorCode.REJECTED


class ServiceDown(RetryableError):
    """The service did not answer, or answered 5xx: retried, and counted by the fleet's
    circuit breaker (a 429 is not: the service is up and pacing its callers)."""


class ServiceUnreachable(ServiceDown):
    """No service there at all: the connection was refused or reset, or a gateway in front
    answered 502, 503 or 504. It feeds the breaker's streak (``store.breaker``), and a task
    it fails while the circuit opens waits instead of spending a delivery."""


class ServiceUnhealthy(DeepAgentsError):
    """The service's ``/v1/health`` failed, or its circuit is open: the worker records the
    instance unhealthy in the registry, with this message as the reason."""

    code = ErrorCode.UNAVAILABLE


def mask_secrets(text: str) -> str:
    """``text`` with secret-looking values masked (what a service's stray text leaks)."""
    return _SECRETS.sub(lambda m: (m.group(1) or "") + REDACTED, text)


def snippet(body: bytes, mask: Mask = str) -> str:
    """The body's first bytes, printable only, secret-looking values masked."""
    # Masked before the cut, so that a secret across the cut leaves none of itself.
    text = mask(mask_secrets(body[: SNIPPET_BYTES * 4].decode("utf-8", "replace")))
    shown = "".join(c if c.isprintable() else "\ufffd" for c in text[:SNIPPET_BYTES])
    return shown + ("…" if len(body) > SNIPPET_BYTES else "")


def protocol_error(step: str, why: str, body: bytes = b"", mask: Mask = str) -> RemoteProtocolError:
    head = f"; body starts {snippet(body, mask)!r}" if body else ""
    return RemoteProtocolError(f"{step}: {why}{head}")


def retry_after_s(value: str | None, now: float | None = None) -> float:
    """``Retry-After`` as seconds from now: delta-seconds or an HTTP date; 0 when absent
    or unreadable. Uncapped: the agent caps it (``max_retry_after_s``, the deadline)."""
    if not value:
        return 0.0
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value) if len(value) <= 12 else math.inf
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, OverflowError, IndexError):
        return 0.0
    return max(0.0, math.ceil(when - (now if now is not None else time.time())))


def _detail(body: bytes, mask: Mask) -> str:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return snippet(body, mask)
    if isinstance(doc, dict):
        detail = doc.get("detail") or doc.get("title") or ""
        error = doc.get("error")
        if not detail and isinstance(error, dict):  # {"error": {"message": …}}, also seen
            detail = error.get("message") or ""
        return mask(mask_secrets(str(detail)[:500]))
    return snippet(body, mask)


def status_error(
    step: str,
    code: int,
    retry_after: str | None,
    body: bytes,
    mask: Mask = str,
) -> Exception:
    """A non-2xx answer: 4xx is final, 429/503 wait their Retry-After, 5xx is retried.
    ``mask`` hides the worker's own secrets in what the body says."""
    what = f"{step}: HTTP {code}"
    detail = _detail(body, mask)
    message = f"{what}: {detail}" if detail else what
    if code in (429, 503):
        wait = retry_after_s(retry_after)
        kind = RetryableError if code == 429 else ServiceUnreachable
        return kind(message, retry_after_s=wait)
    if code in (400, 422):
        return InvalidInput(message)
    if 400 <= code < 500:
        return RemoteRejected(message)
    if code in (502, 504):
        return ServiceUnreachable(message)
    if code >= 500:
        return ServiceDown(message)
    return protocol_error(step, f"unexpected HTTP {code}", body, mask)
