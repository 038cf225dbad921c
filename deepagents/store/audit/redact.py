"""Redaction of audit snapshots, applied before anything reaches PostgreSQL.

- Values under secret-looking keys (password, api_key, authorization, ...) are replaced
  at any depth; so are string values that look like bearer tokens or API keys.
- Prompts are never stored: only a hash (HMAC-SHA-256 when a key is configured, since a
  plain SHA-256 of a short prompt can be confirmed by guessing) and the length.
- Long strings are truncated with a marker saying how much was cut; a whole snapshot
  over the size cap is replaced by a summary.
- NUL characters and lone surrogates become U+FFFD: PostgreSQL rejects both (text and
  jsonb), and one bad character must not fail a batch forever (RELIABILITY row 33).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

REDACTED = "[REDACTED]"
# Matched anywhere in the key, after lower-casing and dropping "_" and "-".
DEFAULT_SECRET_KEYS = (
    "password", "passwd", "secret", "apikey", "privatekey", "authorization", "cookie",
    "credential", "bearer", "sessionid", "accesskey",
)  # fmt: skip
# Matched only at the end of the key: "access_token" is a secret, "tokens_used" is not.
DEFAULT_SECRET_SUFFIXES = ("token", "signature")
DEFAULT_PROMPT_KEYS = frozenset({"prompt", "prompts", "messages", "systemprompt", "completion"})
_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")
_SECRET_VALUE = re.compile(
    r"(?:\bsk-[A-Za-z0-9_-]{16,}|\bBearer\s+[A-Za-z0-9._~+/-]{8,}=*|\bAKIA[0-9A-Z]{16}\b)"
)
_MAX_DEPTH = 32


def clean_text(value: str) -> str:
    """Replace what PostgreSQL cannot store (NUL, lone surrogates) with U+FFFD."""
    return _BAD_CHARS.sub("\ufffd", value)


def _maybe_secret(value: str) -> bool:
    return "sk-" in value or "Bearer" in value or "AKIA" in value


def _norm(key: str) -> str:
    return key.lower().replace("_", "").replace("-", "")


@dataclass(frozen=True)
class RedactionPolicy:
    secret_keys: tuple[str, ...] = DEFAULT_SECRET_KEYS
    secret_suffixes: tuple[str, ...] = DEFAULT_SECRET_SUFFIXES
    prompt_keys: frozenset[str] = DEFAULT_PROMPT_KEYS
    max_string: int = 2_048
    max_snapshot_bytes: int = 16_384
    hash_key: bytes | None = field(default=None, repr=False)

    def with_extra_keys(self, extra: Iterable[str]) -> RedactionPolicy:
        added = tuple(_norm(k) for k in extra if k.strip())
        return RedactionPolicy(
            self.secret_keys + added, self.secret_suffixes, self.prompt_keys,
            self.max_string, self.max_snapshot_bytes, self.hash_key,
        )  # fmt: skip


class Redactor:
    """Applies one RedactionPolicy; caches key decisions (the same keys recur constantly)."""

    def __init__(self, policy: RedactionPolicy | None = None) -> None:
        self.policy = policy or RedactionPolicy()
        self._keys: dict[object, tuple[str, str]] = {}  # key -> (clean key, kind)

    # public -------------------------------------------------------------------------------

    def snapshot(self, value: Any) -> Any:
        """A redacted copy of ``value`` that fits the size cap (JSON-ready)."""
        return orjson.loads(self.snapshot_json(value))

    def snapshot_json(self, value: Any) -> bytes:
        """``snapshot`` already encoded: the writer's path, which serialises only once."""
        encoded = orjson.dumps(self.redact(value))
        cap = self.policy.max_snapshot_bytes
        if len(encoded) <= cap:
            return encoded
        preview = encoded[: cap // 4].decode("utf-8", "ignore")
        return orjson.dumps(
            {
                "_truncated": True,
                "bytes": len(encoded),
                "cut_bytes": len(encoded) - len(preview.encode()),
                "hash": self.digest(encoded),
                "preview": preview,
            }
        )

    def redact(self, value: Any, depth: int = 0) -> Any:
        # Exact type checks first: this runs for every value of every event (hot path).
        kind = type(value)
        if kind is str:
            return self.text(value)
        if kind is int or kind is float or kind is bool or value is None:
            return value
        if isinstance(value, dict):
            if depth >= _MAX_DEPTH:
                return "[depth limit]"
            return self._mapping(value, depth)
        if isinstance(value, list | tuple):
            if depth >= _MAX_DEPTH:
                return "[depth limit]"
            return [self.redact(v, depth + 1) for v in value]
        if isinstance(value, str | int | float):  # subclasses (e.g. an IntEnum)
            return value if not isinstance(value, str) else self.text(value)
        return self.text(str(value))

    def plain(self, value: str) -> bool:
        """True when ``text`` would return ``value`` unchanged for ``limit``-free checks."""
        return value.isascii() and "\x00" not in value and not _maybe_secret(value)

    def text(self, value: str, limit: int | None = None) -> str:
        """Sanitise, mask secret-looking values and truncate one string."""
        limit = self.policy.max_string if limit is None else limit
        # Fast path first: most text is ASCII, where only NUL can be bad.
        if (value.isascii() and "\x00" in value) or (
            not value.isascii() and _BAD_CHARS.search(value)
        ):
            value = clean_text(value)
        if _maybe_secret(value) and _SECRET_VALUE.search(value):
            value = _SECRET_VALUE.sub(REDACTED, value)
        if len(value) > limit:
            cut = len(value) - limit
            value = f"{value[:limit]}…[truncated {cut} chars]"
        return value

    def digest(self, data: bytes) -> str:
        key = self.policy.hash_key
        if key:
            return "hmac-sha256:" + hmac.new(key, data, hashlib.sha256).hexdigest()
        return "sha256:" + hashlib.sha256(data).hexdigest()

    def fingerprint(self, value: Any) -> dict[str, Any]:
        """What is kept of a prompt: its hash and length, never the text."""
        if isinstance(value, str):
            data = value.encode("utf-8", "surrogatepass")
            length = len(value)
        else:
            try:
                data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str)
            except TypeError:  # lone surrogates: orjson refuses them, the stdlib escapes them
                data = json.dumps(value, sort_keys=True, default=str).encode()
            length = len(data)
        return {"hash": self.digest(data), "length": length}

    # internals ----------------------------------------------------------------------------

    def _mapping(self, value: dict[Any, Any], depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        limit = self.policy.max_string
        for key, item in value.items():
            known = self._keys.get(key)
            if known is None:
                known = self._learn(key)
            clean, kind = known
            if kind == "plain":
                # Inline fast path for the common scalars (this loop is the writer's hot spot).
                t = type(item)
                if t is str:
                    plain = len(item) <= limit and self.plain(item)
                    out[clean] = item if plain else self.text(item)
                elif t is int or t is float or t is bool or item is None:
                    out[clean] = item
                else:
                    out[clean] = self.redact(item, depth + 1)
            elif item is None:
                out[clean] = None
            else:
                out[clean] = REDACTED if kind == "secret" else self.fingerprint(item)
        return out

    def _learn(self, key: object) -> tuple[str, str]:
        text = key if isinstance(key, str) else str(key)
        clean = text if text.isascii() and "\x00" not in text else clean_text(text)
        known = (clean, self._classify(text))
        if len(self._keys) < 10_000:  # keys are usually a small fixed set; bound the cache
            self._keys[key] = known
        return known

    def _classify(self, key: str) -> str:
        norm = _norm(key)
        if any(p in norm for p in self.policy.secret_keys) or norm.endswith(
            self.policy.secret_suffixes
        ):
            return "secret"
        if norm in self.policy.prompt_keys or norm.endswith("prompt"):
            return "prompt"
        return "plain"
