"""Bearer API keys per tenant. The tenant comes from the verified key, never from the body.

Keys are random tokens, so a plain SHA-256 of the key is stored (a slow password hash
buys nothing against a 256-bit secret). The presented key's digest is compared with
every configured digest using ``hmac.compare_digest`` and without stopping at a match,
so timing does not tell which key, or how much of one, was right.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from starlette.datastructures import Headers

from deepagents.config.gateway import ApiKey
from deepagents.errors import ErrorCode
from deepagents.gateway.problems import Problem

KEY_PREFIX = "dak_"
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="deepagents"'}


@dataclass(frozen=True, slots=True)
class Principal:
    tenant: str
    key_name: str


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> str:
    """A fresh key: 32 random bytes, URL-safe, with a prefix secret scanners can spot."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


class Authenticator:
    def __init__(self, keys: tuple[ApiKey, ...]) -> None:
        self._keys = tuple((bytes.fromhex(k.sha256), Principal(k.tenant, k.name)) for k in keys)

    def authenticate(self, authorization: str | None) -> Principal:
        token = _bearer_token(authorization)
        digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        found: Principal | None = None
        for stored, principal in self._keys:
            if hmac.compare_digest(stored, digest) and found is None:
                found = principal
        if found is None:
            raise Problem(
                ErrorCode.UNAUTHORIZED,
                "the API key is not valid; check the key your operator issued",
                headers=_CHALLENGE,
            )
        return found


def authorization(headers: Headers) -> str | None:
    """The one ``Authorization`` header, or None. Two are refused: servers and proxies
    disagree on which one counts (the first, the last, or both joined)."""
    values = headers.getlist("authorization")
    if len(values) > 1:
        raise Problem(
            ErrorCode.UNAUTHORIZED,
            "send one Authorization header, not several",
            headers=_CHALLENGE,
        )
    return values[0] if values else None


class MetricsGuard:
    """``/metrics`` names tenants in its labels: with ``gateway.metrics_keys`` set, only a
    bearer of one of those keys may read it (compared as ``Authenticator`` does)."""

    def __init__(self, digests: tuple[str, ...]) -> None:
        self._digests = tuple(bytes.fromhex(d) for d in digests)

    def check(self, authorization: str | None) -> None:
        if not self._digests:
            return
        token = _bearer_token(authorization)
        digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        ok = False
        for stored in self._digests:
            ok |= hmac.compare_digest(stored, digest)
        if not ok:
            raise Problem(
                ErrorCode.UNAUTHORIZED,
                "/metrics needs a metrics key (gateway.metrics_keys)",
                headers=_CHALLENGE,
            )


def _bearer_token(authorization: str | None) -> str:
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Problem(
            ErrorCode.UNAUTHORIZED,
            "send your API key as 'Authorization: Bearer <key>'",
            headers=_CHALLENGE,
        )
    return token
