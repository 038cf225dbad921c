"""``ModelCalls``: the resources behind ``wrap_model_call``, one instance per event loop.

It owns one ``httpx.AsyncClient`` (one connection pool) created on first use in its loop
and closed by ``aclose()``; it refuses to be used from another loop, because an httpx
client (like the Redis client it is given) is bound to the loop it first ran in. The Redis
client is given, so it is not closed here.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from deepagents.config.models import ModelConfig, ModelKind, ProviderKind
from deepagents.modelcall.batching import Batcher
from deepagents.modelcall.credentials import CredentialSource, CredentialStore, source_for
from deepagents.modelcall.errors import InvalidRequest, ModelUnavailable
from deepagents.modelcall.metrics import ModelMetrics
from deepagents.modelcall.providers.anthropic import AnthropicProvider
from deepagents.modelcall.providers.base import Provider
from deepagents.modelcall.providers.openai import OpenAIProvider
from deepagents.modelcall.providers.openai_embeddings import EmbeddingsProvider
from deepagents.modelcall.record import AttemptRecord
from deepagents.store.models import RedisClient
from deepagents.store.models.admission import FleetConcurrency, RateLimiter
from deepagents.store.models.gates import Budget, CircuitBreaker
from deepagents.store.models.keys import ModelKeys, api_key_rate_key, key_fingerprint

log = logging.getLogger("deepagents.modelcall")

RecordHook = Callable[[AttemptRecord], None]
MAX_BACKGROUND = 1000


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The trusted CAs (httpx's defaults), loaded once per process: loading them costs tens
    of milliseconds, which a worker forked by the supervisor then inherits instead."""
    return httpx.create_ssl_context()


def preload() -> None:
    """Load now what the first client loads (the TLS context, the transport's modules), for
    a process about to fork workers. No connection is opened; the transport is dropped."""
    httpx.AsyncHTTPTransport(verify=tls_context())


@dataclass
class ModelRuntime:
    """One model's gates and credential store (shared state in Redis, local semaphore)."""

    name: str
    config: ModelConfig
    keys: ModelKeys
    breaker: CircuitBreaker
    budget: Budget
    limiter: RateLimiter
    fleet: FleetConcurrency | None
    credentials: CredentialStore | None
    semaphore: asyncio.Semaphore
    url: str
    provider: Provider
    _key_limiters: dict[str, RateLimiter] = field(default_factory=dict)

    def key_limiter(
        self, redis: RedisClient, prefix: str, secret: str | None
    ) -> RateLimiter | None:
        """The per-API-key limiter, when configured (shared by models using the same key)."""
        limits = self.config.limits
        if secret is None or (limits.key_rpm is None and limits.key_tpm is None):
            return None
        fingerprint = key_fingerprint(secret)
        if fingerprint not in self._key_limiters:
            self._key_limiters[fingerprint] = RateLimiter(
                redis,
                api_key_rate_key(prefix, fingerprint),
                rpm=limits.key_rpm,
                tpm=limits.key_tpm,
                window_s=limits.window_s,
            )
        return self._key_limiters[fingerprint]


class ModelCalls:
    """Everything ``wrap_model_call`` needs, for one event loop. Use ``async with``."""

    def __init__(
        self,
        models: Mapping[str, ModelConfig],
        redis: RedisClient,
        *,
        prefix: str,
        sources: Mapping[str, CredentialSource | None] | None = None,
        provider: Provider | None = None,
        metrics: ModelMetrics | None = None,
        prompt_hash_key: bytes | None = None,
        on_record: RecordHook | None = None,
    ) -> None:
        self.models = dict(models)
        self.redis = redis
        self.prefix = prefix
        # One provider per API spoken; ``provider`` (tests) speaks for every model.
        self._providers: dict[ProviderKind, Provider] = {
            ProviderKind.OPENAI: provider or OpenAIProvider(),
            ProviderKind.ANTHROPIC: provider or AnthropicProvider(),
        }
        self._embeddings: Provider = EmbeddingsProvider()
        self.metrics = metrics or ModelMetrics()
        self.prompt_hash_key = prompt_hash_key
        self.on_record = on_record
        # Sources given by the caller are the caller's to close; those built here are ours.
        self._given_sources = sources is not None
        self._sources = (
            dict(sources)
            if sources is not None
            else {name: source_for(cfg) for name, cfg in self.models.items()}
        )
        self._runtimes: dict[str, ModelRuntime] = {}
        # embed()'s batches, per (model, tenant, agent): a budget hold is theirs.
        self.batchers: dict[tuple[str, str | None, str], Batcher] = {}
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._background: set[asyncio.Task[Any]] = set()
        self.clients_created = 0

    async def __aenter__(self) -> ModelCalls:
        # Build the pool now: creating an httpx client loads the CA bundle, which blocks the
        # loop for a while; better at start-up than inside the first admitted call.
        self.client()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool and the credential sources built here. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for batcher in self.batchers.values():
            await batcher.aclose(ModelUnavailable("model calls are closing", reason="closing"))
        for runtime in self._runtimes.values():
            await self.after(runtime.breaker.flush())  # successes not yet sent to Redis
        if self._background:
            # Bookkeeping still in flight (breaker records) finishes before the pool closes.
            await asyncio.wait(self._background, timeout=5)
        if self._client is not None:
            await self._client.aclose()
        if not self._given_sources:
            for source in self._sources.values():
                if source is not None:
                    await source.aclose()

    async def after(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run bookkeeping off the caller's path; awaited inline when too much is pending."""
        if len(self._background) >= MAX_BACKGROUND:
            await work
            return
        task = asyncio.create_task(work)
        self._background.add(task)  # a strong reference until it is done
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("model-call bookkeeping failed: %s", type(task.exception()).__name__)

    @property
    def closed(self) -> bool:
        return self._closed

    def client(self) -> httpx.AsyncClient:
        self._bind_loop()
        if self._client is None:
            self._client = httpx.AsyncClient(
                limits=httpx.Limits(
                    max_connections=self._pool_size(), max_keepalive_connections=self._pool_size()
                ),
                timeout=httpx.Timeout(30.0),
                verify=tls_context(),
                follow_redirects=False,  # a redirect could carry the key to another host
            )
            self.clients_created += 1
        return self._client

    def runtime(self, name: str) -> ModelRuntime:
        self._bind_loop()
        if name not in self._runtimes:
            self._runtimes[name] = self._build_runtime(name)
        return self._runtimes[name]

    def _bind_loop(self) -> asyncio.AbstractEventLoop:
        if self._closed:
            raise RuntimeError("ModelCalls is closed")
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError("ModelCalls belongs to another event loop: make one per loop")
        return loop

    def _pool_size(self) -> int:
        # Enough connections for every model's concurrency limit, and no more.
        return max(1, sum(cfg.limits.concurrency for cfg in self.models.values()))

    def _build_runtime(self, name: str) -> ModelRuntime:
        config = self.models.get(name)
        if config is None:
            raise InvalidRequest(f"model {name!r} is not configured (models: section)")
        keys = ModelKeys(self.prefix, name)
        limits = config.limits
        source = self._sources.get(name)
        provider = (
            self._embeddings
            if config.kind is ModelKind.EMBEDDING
            else self._providers[config.provider]
        )
        return ModelRuntime(
            name=name,
            config=config,
            keys=keys,
            breaker=CircuitBreaker(self.redis, keys, config.breaker),
            budget=Budget(self.redis, keys, limits),
            limiter=RateLimiter(
                self.redis, keys.rate, rpm=limits.rpm, tpm=limits.tpm, window_s=limits.window_s
            ),
            fleet=(
                FleetConcurrency(self.redis, keys.inflight, limits.fleet_concurrency)
                if limits.fleet_concurrency
                else None
            ),
            credentials=CredentialStore(self.redis, keys, source) if source else None,
            semaphore=asyncio.Semaphore(limits.concurrency),
            url=str(config.base_url).rstrip("/") + provider.path,
            provider=provider,
        )
