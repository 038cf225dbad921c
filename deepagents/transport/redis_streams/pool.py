"""Build the Redis client for a process and check that the server is safe to run on."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import hiredis
import redis.exceptions as rex
from redis.asyncio import BlockingConnectionPool, Connection, Redis

from deepagents.errors import RedisNotSafe, TransportError

MIN_VERSION = (6, 2)
# From 3.12 asyncio.wait_for is built on asyncio.timeout and starts no Task of its own.
_WAIT_FOR_STARTS_A_TASK = sys.version_info < (3, 12)


class _HiredisPackingConnection(Connection):
    """Packs commands with hiredis (C) instead of redis-py's pure-Python packer for asyncio:
    the commit and begin scripts carry several arguments per task, so packing is hot."""

    def pack_command(self, *args: Any) -> list[bytes]:
        head = args[0]
        if isinstance(head, str):
            head = head.encode()
        if b" " in head:  # e.g. "CONFIG GET": the words go separately
            args = (*head.split(), *args[1:])
        try:
            return [hiredis.pack_command(args)]
        except TypeError:
            return super().pack_command(*args)

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        """redis-py bounds each write with ``asyncio.wait_for``, which on Python 3.11 starts
        a Task per command: about 30 µs of CPU per command on the reference machine
        (``loadtests/bench_redis_client.py``). ``asyncio.timeout`` bounds it the same way
        with a timer; a write that times out closes the connection, as redis-py's does."""
        limit = self.socket_timeout
        if not limit or not _WAIT_FOR_STARTS_A_TASK:
            return await super().send_packed_command(command, check_health)
        self.socket_timeout = None  # the write below runs without redis-py's wait_for
        try:
            async with asyncio.timeout(limit):
                await super().send_packed_command(command, check_health)
        except TimeoutError:  # asyncio's; redis-py's own (connect) is not this class
            await self.disconnect(nowait=True)
            raise rex.TimeoutError("Timeout writing to socket") from None
        finally:
            self.socket_timeout = limit


def connect(url: str, *, max_connections: int = 64, block_ms: int = 1_000) -> Redis:
    """One client (with its pool) per process and event loop; the caller closes it."""
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=20,  # wait this long for a free connection rather than fail at once
        connection_class=_HiredisPackingConnection,
        # Reads block for block_ms at most; a socket silent for longer than that plus
        # a margin is half-open, not idle.
        socket_timeout=block_ms / 1000 + 10,
        socket_connect_timeout=5,
        socket_keepalive=True,
        health_check_interval=30,
        decode_responses=False,
    )
    return Redis.from_pool(pool)  # the client owns the pool: aclose() closes both


async def check_server(client: Any, *, allow_evicting: bool = False) -> str:
    """Refuse a Redis that can lose tasks; return its version."""
    try:
        info = await client.info("server")
        reply = await client.config_get("maxmemory-policy")
        policy = reply.get("maxmemory-policy", reply.get(b"maxmemory-policy", b""))
    except rex.ResponseError as exc:
        # Managed Redis often disables CONFIG; INFO memory still reports the policy.
        if "unknown command" not in str(exc).lower() and "NOPERM" not in str(exc):
            raise TransportError(f"cannot inspect Redis: {exc}") from exc
        memory = await client.info("memory")
        policy = str(memory.get("maxmemory_policy", "")).encode()
    except (rex.ConnectionError, rex.TimeoutError) as exc:
        raise TransportError(f"cannot reach Redis: {exc}") from exc
    version = str(info.get("redis_version", "0"))
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if parts < MIN_VERSION:
        raise RedisNotSafe(
            f"Redis {version} is too old: deepagents needs 6.2 or newer (XAUTOCLAIM)"
        )
    policy_s = policy.decode() if isinstance(policy, bytes) else str(policy)
    if policy_s != "noeviction" and not allow_evicting:
        raise RedisNotSafe(
            f"Redis maxmemory-policy is {policy_s!r}: an evicting Redis silently drops tasks. "
            "Set 'maxmemory-policy noeviction' (or DEEPAGENTS_ALLOW_EVICTING_REDIS=true for tests)"
        )
    return version
