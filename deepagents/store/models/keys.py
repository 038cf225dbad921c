"""Redis keys of the model-call layer. All keys of one model share the hash tag
``{model:<name>}`` so every gate is one script on one slot, on Redis Cluster too."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

_SAFE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def safe_part(value: str) -> str:
    """A value usable inside a key: itself when plain, else a hash (no braces, no colons)."""
    if _SAFE.match(value):
        return value
    return "h" + hashlib.sha256(value.encode()).hexdigest()[:24]


def key_fingerprint(secret: str) -> str:
    """Names an API key in Redis keys and logs without revealing it."""
    return hashlib.sha256(secret.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class ModelKeys:
    prefix: str
    model: str

    def _k(self, suffix: str) -> str:
        return f"{self.prefix}:{{model:{self.model}}}:{suffix}"

    @property
    def breaker(self) -> str:
        return self._k("cb")

    @property
    def breaker_window(self) -> str:
        return self._k("cb:win")

    def day(self, day: str) -> str:
        return self._k(f"day:{day}")

    @property
    def rate(self) -> str:
        return self._k("rate")

    @property
    def inflight(self) -> str:
        return self._k("inflight")

    @property
    def credential(self) -> str:
        return self._k("cred")

    @property
    def credential_lock(self) -> str:
        return self._k("cred:lock")


def api_key_rate_key(prefix: str, fingerprint: str) -> str:
    return f"{prefix}:{{apikey:{fingerprint}}}:rate"
