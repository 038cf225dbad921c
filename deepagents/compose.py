"""The composition root: builds, from the settings, the Redis connection pools, the message
bus and the stores that everything above the transport is given.

The only module outside ``transport/`` and ``store/`` that names Redis: the orchestrator,
the worker, the admin views, the gateway and the exporter take a ``Services`` and never
build a bus or a client of their own.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from redis.asyncio import Redis

from deepagents.config.settings import Settings
from deepagents.errors import ConfigError
from deepagents.store.answers import AnswerCache
from deepagents.store.base import Answers, Registry, Rollouts, TaskRecords
from deepagents.store.claims import ClaimStore, MemoryClaims
from deepagents.store.registry import AgentRegistry
from deepagents.store.rollouts import RedisRollouts
from deepagents.store.step_bodies import claim_store
from deepagents.store.tasks import TaskStore
from deepagents.transport.base import MessageBus
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams.bus import RedisStreamBus
from deepagents.transport.redis_streams.pool import check_reachable, connect
from deepagents.transport.redis_streams.scripts import Scripts

# The connection pools' client, for the layers that still speak Redis themselves (the
# model-call gates, the gateway's admission): see the exceptions in pyproject's contracts.
# Typed as ``connect`` types it: a ``RedisCluster`` on a cluster, used through the same API.
RedisClient = Redis


@dataclass(slots=True)
class Services:
    """What one process's components share. ``aclose()`` closes the bus's own connections,
    and the client too when these services opened it. ``client`` is None for in-memory
    services (``memory_services``): no server at all."""

    client: RedisClient | None
    bus: MessageBus
    tasks: TaskRecords
    registry: Registry
    keys: Keys
    rollouts: Rollouts | None = None
    owns_client: bool = field(default=False, repr=False)
    # The last good answers ``degrade`` may answer from; None: none kept (no degrade cache).
    answers: Answers | None = field(default=None, repr=False)
    # Bodies of step records too large for Redis (a claim check); None: no database.
    claims: ClaimStore | None = None

    async def aclose(self) -> None:
        await self.bus.aclose()
        if self.claims is not None:
            await self.claims.aclose()
        if self.owns_client and self.client is not None:
            await self.client.aclose()


def preload(url: str, *, cluster: bool = False) -> None:
    """Load now, in a process about to fork workers, what building the Redis services would
    load in each of them: the scripts' sources, and the Redis library's per-process caches
    (its response callbacks, its version for the client's name), filled by building a client
    and a connection object. Nothing is connected."""
    Scripts.preload()
    if not cluster:
        open_client(url, max_connections=1).connection_pool.make_connection()  # type: ignore[no-untyped-call]


def services_for(client: RedisClient, settings: Settings) -> Services:
    """Services over a client the caller opened (and closes)."""
    keys = Keys(settings.prefix)
    return Services(
        client=client,
        bus=RedisStreamBus(
            client,
            result_ttl_s=settings.result_ttl_s,
            replicas=settings.min_replicas,
            replica_wait_ms=settings.replica_wait_ms,
            allow_evicting=settings.allow_evicting_redis,
        ),
        tasks=TaskStore(client, keys),
        registry=AgentRegistry(client, keys),
        keys=keys,
        answers=AnswerCache(client, keys),
        rollouts=RedisRollouts(client, keys),
        claims=claim_store(settings),
    )


def memory_services(settings: Settings) -> Services:
    """Services in this process (``MemoryBus`` and its stores): the protocol without Redis,
    for unit tests and ``deepagents.testing``. Their records live as long as the object."""
    # Imported here: a process on Redis (every worker, the gateway) never loads them.
    from deepagents.store.memory_answers import MemoryAnswers
    from deepagents.store.memory_registry import MemoryRegistry
    from deepagents.store.memory_rollouts import MemoryRollouts
    from deepagents.store.memory_tasks import MemoryTaskStore
    from deepagents.transport.memory import MemoryBus, State

    keys = Keys(settings.prefix)
    state = State()
    registry = MemoryRegistry()
    return Services(
        client=None,
        bus=MemoryBus(
            state,
            result_ttl_s=settings.result_ttl_s,
            replicas=settings.min_replicas,
            replica_wait_ms=settings.replica_wait_ms,
        ),
        tasks=MemoryTaskStore(state, keys),
        registry=registry,
        keys=keys,
        answers=MemoryAnswers(state, keys),
        rollouts=MemoryRollouts(registry),
        claims=MemoryClaims(),
    )


def open_client(
    url: str, *, max_connections: int = 64, cluster: bool = False, block_ms: int = 1_000
) -> RedisClient:
    """A client with the pools the protocol needs (keepalive, health checks, timeouts).
    ``block_ms``: the longest its blocking reads wait (its socket timeout outlasts it)."""
    return connect(url, max_connections=max_connections, cluster=cluster, block_ms=block_ms)


def open_services(settings: Settings, *, max_connections: int = 64) -> Services:
    """Services over a client of their own, from ``DEEPAGENTS_REDIS_URL``."""
    if settings.redis_url is None:
        raise ConfigError("DEEPAGENTS_REDIS_URL is not set")
    client = open_client(
        settings.redis_url.get_secret_value(),
        max_connections=max_connections,
        cluster=settings.redis_cluster,
    )
    services = services_for(client, settings)
    services.owns_client = True
    return services


@contextlib.asynccontextmanager
async def redis_client(
    url: str, *, max_connections: int = 64, cluster: bool = False, block_ms: int = 1_000
) -> AsyncIterator[RedisClient]:
    client = open_client(url, max_connections=max_connections, cluster=cluster, block_ms=block_ms)
    try:
        await check_reachable(client)  # an unreachable Redis: one line, before anything else
        yield client
    finally:
        await client.aclose()
