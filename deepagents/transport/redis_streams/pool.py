"""Build the Redis client for a process and check that the server is safe to run on."""

from __future__ import annotations

import asyncio
import sys
from typing import Any, cast

import hiredis
import redis.exceptions as rex
from redis.asyncio import BlockingConnectionPool, Connection, Redis, RedisCluster

from deepagents.errors import RedisNotSafe, TransportError

MIN_VERSION = (6, 2)
CLUSTER_MAX_CONNECTIONS = 1024  # per node
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


def connect(
    url: str, *, max_connections: int = 64, block_ms: int = 1_000, cluster: bool = False
) -> Redis:
    """One client (with its pool) per process and event loop; the caller closes it.
    ``cluster``: a ``RedisCluster`` client, which finds the other nodes from this one."""
    options: dict[str, Any] = {
        # Reads block for block_ms at most; a socket silent for longer than that plus
        # a margin is half-open, not idle.
        "socket_timeout": block_ms / 1000 + 10,
        "socket_connect_timeout": 5,
        "socket_keepalive": True,
        "health_check_interval": 30,
        "decode_responses": False,
    }
    if cluster:
        # Typed as Redis for callers: the commands deepagents sends are common to both,
        # and the transport's own connections (lanes, reply channel) check which it is.
        # redis-py's cluster client has no blocking pool: past a node's cap a command fails
        # at once (MaxConnectionsError) rather than wait for a connection, so the cap is
        # set high enough that concurrent waiters never meet it.
        per_node = max(max_connections, CLUSTER_MAX_CONNECTIONS)
        client: Any = RedisCluster.from_url(url, max_connections=per_node, **options)
        return cast(Redis, client)
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=20,  # wait this long for a free connection rather than fail at once
        connection_class=_HiredisPackingConnection,
        **options,
    )
    return Redis.from_pool(pool)  # the client owns the pool: aclose() closes both


def own_connection(client: Redis | RedisCluster, node: str | None = None) -> Connection:
    """A new connection with the client's settings, outside its pool (the caller owns it
    and closes it): to the named node of a cluster (any node if None; the cluster client
    must be initialized), or to the client's server."""
    if isinstance(client, RedisCluster):
        found = client.get_node(node_name=node) if node else client.get_random_node()
        if found is None:  # left the cluster since it was looked up
            raise rex.ConnectionError(f"cluster node {node} is gone")
        conn: Connection = found.connection_class(**found.connection_kwargs)
        return conn
    pool: Any = client.connection_pool
    made: Connection = pool.make_connection()
    return made


def socket_timeout_of(client: Redis | RedisCluster) -> float | None:
    """The seconds a connection of ``client`` waits for a reply (None: no limit)."""
    if isinstance(client, RedisCluster):
        kwargs: dict[str, Any] = client.nodes_manager.connection_kwargs
    else:
        kwargs = client.connection_pool.connection_kwargs
    timeout = kwargs.get("socket_timeout")
    return None if timeout is None else float(timeout)


async def check_reachable(client: Any) -> None:
    """One PING, so a command facing an unreachable Redis says so in one line at start
    rather than in whichever step first needs it."""
    try:
        await client.ping()
    except (rex.ConnectionError, rex.TimeoutError, rex.RedisClusterException) as exc:
        raise unreachable(exc) from exc


def unreachable(exc: Exception) -> TransportError:
    return TransportError(f"cannot reach Redis: {exc}")


async def check_server(client: Any, *, allow_evicting: bool = False) -> str:
    """Refuse a Redis that can lose tasks; return its version. On a cluster every primary
    is checked (each has its own configuration), and the oldest version is returned."""
    if isinstance(client, RedisCluster):
        await client.initialize()
        versions = [
            await _check_node(client, allow_evicting, target_nodes=node)
            for node in client.get_primaries()
        ]
        return min(versions, key=_version)
    return await _check_node(client, allow_evicting)


async def _check_node(client: Any, allow_evicting: bool, **target: Any) -> str:
    try:
        info = await client.info("server", **target)
        reply = await client.config_get("maxmemory-policy", **target)
        policy = reply.get("maxmemory-policy", reply.get(b"maxmemory-policy", b""))
    except rex.ResponseError as exc:
        # Managed Redis often disables CONFIG; INFO memory still reports the policy.
        if "unknown command" not in str(exc).lower() and "NOPERM" not in str(exc):
            raise TransportError(f"cannot inspect Redis: {exc}") from exc
        memory = await client.info("memory", **target)
        policy = str(memory.get("maxmemory_policy", "")).encode()
    except (rex.ConnectionError, rex.TimeoutError) as exc:
        raise unreachable(exc) from exc
    version = str(info.get("redis_version", "0"))
    if _version(version) < MIN_VERSION:
        raise RedisNotSafe(
            f"Redis {version} is too old: deepagents needs 6.2 or newer (XAUTOCLAIM)"
        )
    policy_s = policy.decode() if isinstance(policy, bytes) else str(policy)
    if policy_s != "noeviction" and not allow_evicting:
        where = f" on {target['target_nodes'].name}" if target else ""
        raise RedisNotSafe(
            f"Redis maxmemory-policy is {policy_s!r}{where}: an evicting Redis silently drops "
            "tasks. Set 'maxmemory-policy noeviction' (or DEEPAGENTS_ALLOW_EVICTING_REDIS=true "
            "for tests)"
        )
    return version


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".")[:2] if p.isdigit())
