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
        self._kind: dict[str, str] = {}

    # public -------------------------------------------------------------------------------

    def snapshot(self, value: Any) -> Any:
        """A redacted copy of ``value`` that fits the size cap (JSON-ready)."""
        redacted = self.redact(value)
        encoded = orjson.dumps(redacted)
        cap = self.policy.max_snapshot_bytes
        if len(encoded) <= cap:
            return redacted
        preview = encoded[: cap // 4].decode("utf-8", "ignore")
        return {
            "_truncated": True,
            "bytes": len(encoded),
            "cut_bytes": len(encoded) - len(preview.encode()),
            "hash": self.digest(encoded),
            "preview": preview,
        }

    def redact(self, value: Any, depth: int = 0) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            if depth >= _MAX_DEPTH:
                return "[depth limit]"
            return {self.text(str(k)): self._entry(str(k), v, depth) for k, v in value.items()}
        if isinstance(value, list | tuple):
            if depth >= _MAX_DEPTH:
                return "[depth limit]"
            return [self.redact(v, depth + 1) for v in value]
        if value is None or isinstance(value, bool | int | float):
            return value
        return self.text(str(value))

    def text(self, value: str, limit: int | None = None) -> str:
        """Sanitise, mask secret-looking values and truncate one string."""
        limit = self.policy.max_string if limit is None else limit
        if _BAD_CHARS.search(value):
            value = clean_text(value)
        if ("sk-" in value or "Bearer" in value or "AKIA" in value) and _SECRET_VALUE.search(value):
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

    def _entry(self, key: str, value: Any, depth: int) -> Any:
        kind = self._kind.get(key)
        if kind is None:
            kind = self._classify(key)
            if len(self._kind) < 10_000:  # keys are usually a small fixed set; bound the cache
                self._kind[key] = kind
        if kind == "secret":
            return REDACTED if value is not None else None
        if kind == "prompt" and value is not None:
            return self.fingerprint(value)
        return self.redact(value, depth + 1)

    def _classify(self, key: str) -> str:
        norm = _norm(key)
        if any(p in norm for p in self.policy.secret_keys) or norm.endswith(
            self.policy.secret_suffixes
        ):
            return "secret"
        if norm in self.policy.prompt_keys or norm.endswith("prompt"):
            return "prompt"
        return "plain"
