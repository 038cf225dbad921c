"""How a webhook delivery is signed, and how a receiver checks it (docs/webhooks.md).

The signature header is ``DeepAgents-Signature: t=<unix seconds>,v1=<hex>``, where ``<hex>``
is HMAC-SHA256, keyed with the endpoint's secret, over ``<t>.<body>`` (the timestamp, a dot,
then the request's raw body bytes): the scheme Stripe uses. Signing the timestamp with the
body lets a receiver refuse a captured request replayed later (``tolerance_s``); the event
id in the body (and in ``DeepAgents-Event-Id``) lets it drop a redelivery it already took.
"""

from __future__ import annotations

import hashlib
import hmac
import time

from deepagents.errors import DeepAgentsError, ErrorCode

SIGNATURE_HEADER = "DeepAgents-Signature"
EVENT_ID_HEADER = "DeepAgents-Event-Id"
DEFAULT_TOLERANCE_S = 300  # how old a signed timestamp a receiver accepts by default


class WebhookSignatureError(DeepAgentsError):
    """A webhook request whose signature does not verify: refuse it (answer 400 or 401)."""

    code = ErrorCode.UNAUTHORIZED


def _key(secret: str | bytes) -> bytes:
    return secret.encode() if isinstance(secret, str) else secret


def signature(secret: str | bytes, body: bytes, timestamp: int) -> str:
    """The hex HMAC-SHA256 of ``<timestamp>.<body>``."""
    message = str(timestamp).encode() + b"." + body
    return hmac.new(_key(secret), message, hashlib.sha256).hexdigest()


def signature_header(secret: str | bytes, body: bytes, timestamp: int | None = None) -> str:
    """The value of ``DeepAgents-Signature`` for ``body`` sent now (or at ``timestamp``)."""
    t = int(time.time()) if timestamp is None else timestamp
    return f"t={t},v1={signature(secret, body, t)}"


def verify_signature(
    secret: str | bytes,
    body: bytes,
    header: str | None,
    *,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> int:
    """Check a delivery: ``header`` is the request's ``DeepAgents-Signature``, ``body`` its
    raw bytes (before any JSON parsing). Returns the signed timestamp; raises
    ``WebhookSignatureError`` when the header is missing or malformed, when no ``v1``
    signature matches (compared in constant time), or when the timestamp is further than
    ``tolerance_s`` from ``now``."""
    if not header:
        raise WebhookSignatureError(f"no {SIGNATURE_HEADER} header")
    timestamp: int | None = None
    given: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isdigit():
            timestamp = int(value)
        elif name == "v1" and value:
            given.append(value)
    if timestamp is None or not given:
        raise WebhookSignatureError(f"malformed {SIGNATURE_HEADER} header: want t=...,v1=...")
    expected = signature(secret, body, timestamp)
    if not any(hmac.compare_digest(expected, v) for v in given):
        raise WebhookSignatureError("the signature does not match the body and the secret")
    clock = time.time() if now is None else now
    if abs(clock - timestamp) > tolerance_s:
        raise WebhookSignatureError(
            f"the signed timestamp is {abs(clock - timestamp):.0f} s away from now "
            f"(tolerance {tolerance_s:.0f} s): a replayed or delayed request"
        )
    return timestamp


__all__ = [
    "DEFAULT_TOLERANCE_S",
    "EVENT_ID_HEADER",
    "SIGNATURE_HEADER",
    "WebhookSignatureError",
    "signature",
    "signature_header",
    "verify_signature",
]
