"""API keys: from the environment or from Vault (KV v2 through hvac), and the fleet-wide
refresh after a 401.

A 401 means the key this worker holds is no longer valid. One worker in the fleet takes a
Redis lock (a lease with a TTL), fetches the key again and publishes it with a version
number; the others wait for the version to move and adopt the published key. The shared
copy (``store/models/credentials.py``: a fenced compare-and-set on the version) lives in
Redis with a TTL: protect that Redis with ACLs, as for everything else deepagents stores.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from deepagents.config.models import ModelConfig, VaultConfig
from deepagents.modelcall.errors import CredentialError
from deepagents.store.models import RedisClient
from deepagents.store.models.credentials import Credential, SharedCredential
from deepagents.store.models.keys import ModelKeys


class CredentialSource(Protocol):
    """Where a model's API key comes from. ``fetch`` returns the current key."""

    description: str

    async def fetch(self) -> str: ...

    async def aclose(self) -> None: ...


class EnvSource:
    def __init__(self, variable: str) -> None:
        self.variable = variable
        self.description = f"env:{variable}"

    async def fetch(self) -> str:
        value = os.environ.get(self.variable, "")
        if not value:
            # Fail closed: never call a provider with an empty or default key.
            raise CredentialError(f"environment variable {self.variable} is not set")
        return value

    async def aclose(self) -> None:
        return None


class VaultSource:
    """Reads the key from Vault KV v2 and keeps the Vault token alive.

    The token is looked up once (``auth/token/lookup-self``) and renewed
    (``auth/token/renew-self``) once two thirds of its TTL have passed, as Vault's own
    lifetime watcher does; a token that cannot be renewed and has expired fails closed.
    hvac is blocking, so it runs in a thread, one request at a time.
    """

    RENEW_FRACTION = 2 / 3

    def __init__(
        self, config: VaultConfig, token: str, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not token:
            raise CredentialError(f"Vault token variable {config.token_env} is not set")
        self.config = config
        self.description = f"vault:{config.mount}/{config.path}#{config.field}"
        self.version: int | None = None
        self._clock = clock
        # Imported only when a model's key is in Vault: other processes start without it.
        import hvac
        import hvac.exceptions

        self._vault_error: type[Exception] = hvac.exceptions.VaultError
        self._client = hvac.Client(url=str(config.url), token=token, timeout=config.timeout_s)
        self._lock = threading.Lock()
        self._checked_at: float | None = None
        self._ttl_s = 0.0
        self._renewable = False

    async def fetch(self) -> str:
        return await asyncio.to_thread(self._fetch_sync)

    async def aclose(self) -> None:
        await asyncio.to_thread(self._client.adapter.close)

    def _fetch_sync(self) -> str:
        with self._lock:
            try:
                self._ensure_token()
                reply = self._client.secrets.kv.v2.read_secret_version(
                    path=self.config.path,
                    mount_point=self.config.mount,
                    raise_on_deleted_version=True,
                )
            # requests' errors (hvac's transport) are OSErrors: refused, reset, timed out.
            except (self._vault_error, OSError) as exc:
                # The message names the path and the error class; never the token.
                raise CredentialError(
                    f"Vault read of {self.description} failed: {type(exc).__name__}"
                ) from None
        return self._extract(reply)

    def _extract(self, reply: Any) -> str:
        try:
            data = reply["data"]
            value = data["data"][self.config.field]
            self.version = int(data["metadata"]["version"])
        except (KeyError, TypeError, ValueError):
            raise CredentialError(f"Vault secret {self.description} has no such field") from None
        if not isinstance(value, str) or not value:
            raise CredentialError(f"Vault secret {self.description} is empty")
        return value

    def _ensure_token(self) -> None:
        now = self._clock()
        if self._checked_at is None:
            data = self._client.auth.token.lookup_self()["data"]
            self._remember(now, float(data.get("ttl") or 0), bool(data.get("renewable")))
            return
        if self._ttl_s <= 0:  # a token without expiry (e.g. a root token in development)
            return
        elapsed = now - self._checked_at
        if elapsed < self._ttl_s * self.RENEW_FRACTION:
            return
        if self._renewable:
            auth = self._client.auth.token.renew_self()["auth"]
            self._remember(now, float(auth.get("lease_duration") or 0), bool(auth.get("renewable")))
        elif elapsed >= self._ttl_s:
            raise CredentialError("the Vault token has expired and cannot be renewed")

    def _remember(self, now: float, ttl_s: float, renewable: bool) -> None:
        self._checked_at, self._ttl_s, self._renewable = now, ttl_s, renewable


def source_for(model: ModelConfig) -> CredentialSource | None:
    """The configured source of a model's key: Vault first, else the environment, else none
    (a local gateway such as Ollama needs no key)."""
    if model.vault is not None:
        return VaultSource(model.vault, os.environ.get(model.vault.token_env, ""))
    if model.api_key_env:
        return EnvSource(model.api_key_env)
    return None


def missing_credential(model: ModelConfig) -> str | None:
    """Why a model has no credential here (checked without fetching it), or None: a
    worker says so once at start instead of every call failing into its fallback."""
    if model.vault is not None:
        token = model.vault.token_env
        return None if os.environ.get(token) else f"environment variable {token} is not set"
    if model.api_key_env and not os.environ.get(model.api_key_env):
        return f"environment variable {model.api_key_env} is not set"
    return None


class CredentialStore:
    """The key one model is called with, shared by the fleet through Redis."""

    def __init__(
        self,
        redis: RedisClient,
        keys: ModelKeys,
        source: CredentialSource,
        *,
        lock_ttl_s: float = 10.0,
        cache_ttl_s: float = 3600.0,
    ) -> None:
        self._shared_copy = SharedCredential(
            redis, keys, lock_ttl_ms=int(lock_ttl_s * 1000), cache_ttl_ms=int(cache_ttl_s * 1000)
        )
        self.source = source
        self._current: Credential | None = None
        self._local: asyncio.Lock | None = None
        self.refreshes = 0  # fetches this process made because of a 401

    async def current(self) -> Credential:
        if self._current is None:
            async with self._local_lock():
                if self._current is None:
                    self._current = await self._shared() or await self._initial()
        return self._current

    async def refresh(self, seen_version: int, *, timeout_s: float) -> Credential:
        """A newer key than ``seen_version``: adopted from the fleet, or fetched once."""
        async with self._local_lock():
            if self._current is not None and self._current.version > seen_version:
                return self._current
            self._current = await self._refresh_fleet(seen_version, timeout_s)
            return self._current

    def _local_lock(self) -> asyncio.Lock:
        # Created on first use so it belongs to the running loop.
        if self._local is None:
            self._local = asyncio.Lock()
        return self._local

    async def _shared(self) -> Credential | None:
        return await self._shared_copy.read()

    async def _initial(self) -> Credential:
        secret = await self.source.fetch()
        published = await self._shared_copy.publish(0, secret)
        if published:
            return Credential(secret, int(published))
        # Another worker published first: use theirs, so the fleet agrees on one version.
        return await self._shared() or Credential(secret, 0)

    async def _refresh_fleet(self, seen_version: int, timeout_s: float) -> Credential:
        give_up = time.monotonic() + timeout_s
        while time.monotonic() < give_up:
            shared = await self._shared()
            if shared is not None and shared.version > seen_version:
                return shared
            token = uuid.uuid4().hex
            if await self._shared_copy.lock(token):
                try:
                    fresh = await self._fetch_and_publish(token, seen_version)
                finally:
                    await self._shared_copy.unlock(token)
                if fresh is not None:
                    return fresh
                continue
            await asyncio.sleep(0.02 + random.random() * 0.03)
        raise CredentialError("timed out waiting for the fleet's credential refresh")

    async def _fetch_and_publish(self, token: str, seen_version: int) -> Credential | None:
        # Re-read under the lock: a holder that released just before we locked may have
        # published already.
        again = await self._shared()
        if again is not None and again.version > seen_version:
            return again
        secret = await self.source.fetch()
        self.refreshes += 1
        expected = again.version if again is not None else 0
        published = await self._shared_copy.publish(expected, secret, token)
        return Credential(secret, published) if published else None
