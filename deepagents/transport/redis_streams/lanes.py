"""Connections for the worker's stream commands (read, reclaim, begin, commit), no pool.

Through redis-py's client every command pays the pool's lock and wait timeout, the
client's retry wrapper and its reply callbacks: about 130 µs of CPU per command on the
reference machine, against about 55 µs sending on a connection directly (both with the
hiredis parser; ``loadtests/bench_redis_client.py``). The hot commands carry a batch
each, but at thousands of tasks a second that difference is a large share of what the
worker spends.

Each exchange takes an idle connection (or opens one), writes its commands in one go,
reads every reply, and gives the connection back. A connection that failed or was
cancelled mid-exchange may have replies in flight: it is closed, never reused. Errors are
redis-py's exceptions, as from the client, so callers map them the same way.

Given a ``RedisCluster`` client, each command goes to the node serving its key's slot
(every command here names its shard's keys, one slot); a pipeline spanning nodes is split
and the parts sent at once. A ``MOVED`` or ``ASK`` answer (slots migrating) refreshes the
client's map of the cluster before it is raised: the caller's retry finds the new node.
So does a node that cannot be reached: after a failover its slots are served elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import redis.exceptions as rex
from redis.asyncio import Redis, RedisCluster
from redis.asyncio.connection import AbstractConnection

from deepagents._internal.deadlines import Deadlines
from deepagents.transport.redis_streams.pool import own_connection, socket_timeout_of

_SINGLE = ""  # the node name of a client that is not a cluster's
# Answers after which a cluster's map of slots to nodes may be out of date: slots moving
# (MOVED is an AskError too), a primary being replaced, or its node gone (a failover).
_MAP_CHANGED = (rex.AskError, rex.ClusterDownError, rex.ConnectionError, rex.TimeoutError)


class Lanes:
    """Owned by one bus; ``aclose()`` closes the connections it opened."""

    def __init__(self, client: Redis | RedisCluster) -> None:
        self._client = client
        self._cluster = client if isinstance(client, RedisCluster) else None
        self._idle: dict[str, list[AbstractConnection]] = {}
        self._open: set[AbstractConnection] = set()
        self._deadlines = Deadlines()  # each exchange within its socket timeout
        self.longest_block_ms = _longest_block_ms(socket_timeout_of(client))

    async def call(self, *command: Any) -> Any:
        (reply,) = await self.pipeline([command])
        return reply

    async def pipeline(
        self, commands: Sequence[Sequence[Any]], *, raise_on_error: bool = True
    ) -> list[Any]:
        """Send the commands in one write (per node) and return their replies, in order.
        An error reply raises (the connection is then closed: later replies were left
        unread), or with ``raise_on_error=False`` takes its command's place in the replies
        (every reply is read, so the connection stays in step)."""
        if self._cluster is None:  # the worker's hot path: straight to the one server
            return await self._exchange(_SINGLE, commands, raise_on_error)
        groups = await self._by_node(commands)
        parts = await self._send(commands, groups, raise_on_error, ())
        return _merged(len(commands), groups, parts)

    async def pipeline_replicated(
        self, commands: Sequence[Sequence[Any]], replicas: int, wait_ms: int
    ) -> tuple[list[Any], int]:
        """As ``pipeline``, each node's part followed by ``WAIT replicas wait_ms`` on the
        same connection (``WAIT`` counts the writes of its own connection). Returns the
        replies and the fewest replicas that any node confirmed its part to."""
        groups = await self._by_node(commands)
        parts = await self._send(commands, groups, True, ("WAIT", replicas, wait_ms))
        confirmed = min(int(part[-1]) for part in parts)
        return _merged(len(commands), groups, [part[:-1] for part in parts]), confirmed

    async def _by_node(self, commands: Sequence[Sequence[Any]]) -> dict[str, list[int]]:
        """The commands' positions per node that serves them (one node: all of them)."""
        if self._cluster is None:
            return {_SINGLE: list(range(len(commands)))}
        await self._cluster.initialize()  # learns the nodes on first use; then a no-op
        by_node: dict[str, list[int]] = {}
        for i, command in enumerate(commands):
            node = self._cluster.get_node_from_key(_key(command))
            if node is None:  # a slot no node serves: the cluster is down or resharding
                raise rex.ClusterDownError(f"no node serves the slot of {_key(command)!r}")
            by_node.setdefault(node.name, []).append(i)
        return by_node

    async def _send(
        self,
        commands: Sequence[Sequence[Any]],
        groups: dict[str, list[int]],
        raise_on_error: bool,
        tail: tuple[Any, ...],
    ) -> list[list[Any]]:
        """Each node's part at once, ``tail`` (a command) after each; replies per part."""
        extra = [tail] if tail else []
        if len(groups) == 1:
            ((node, _),) = groups.items()
            return [await self._exchange(node, [*commands, *extra], raise_on_error)]
        return list(
            await asyncio.gather(
                *(
                    self._exchange(node, [*(commands[i] for i in at), *extra], raise_on_error)
                    for node, at in groups.items()
                )
            )
        )

    async def load_script(self, script: str) -> None:
        """SCRIPT LOAD on every node a script may run on (a cluster's primaries)."""
        if self._cluster is None:
            await self._exchange(_SINGLE, [("SCRIPT", "LOAD", script)])
            return
        await self._cluster.initialize()
        nodes = self._cluster.get_primaries()
        await asyncio.gather(*(self._exchange(n.name, [("SCRIPT", "LOAD", script)]) for n in nodes))

    async def _exchange(
        self, node: str, commands: Sequence[Sequence[Any]], raise_on_error: bool = True
    ) -> list[Any]:
        idle = self._idle.get(node)
        try:
            conn = idle.pop() if idle else self._connection(node)
        except _MAP_CHANGED:  # the map names a node the node table no longer holds
            if self._cluster is not None:
                await self._refresh_map()
            raise
        limit = conn.socket_timeout
        task = self._deadlines.start(limit) if limit else None
        try:
            replies = await _round_trip(conn, commands, raise_on_error)
        except BaseException as exc:
            timed_out = False
            if task is not None:
                cancelled = isinstance(exc, asyncio.CancelledError)
                timed_out = cancelled and self._deadlines.expired(task)
                self._deadlines.end(task)
            self._open.discard(conn)
            await conn.disconnect(nowait=True)
            if self._cluster is not None and (timed_out or isinstance(exc, _MAP_CHANGED)):
                await self._refresh_map()  # a timeout too: its node may be gone
            if timed_out:  # the caller sees redis-py's error, as from a client
                raise rex.TimeoutError(f"no reply from Redis within {limit} s") from None
            raise
        if task is not None:
            self._deadlines.end(task)
        self._idle.setdefault(node, []).append(conn)
        return replies

    async def _refresh_map(self) -> None:
        """Ask the cluster again which node serves which slots. After a failover the dead
        primary's address stays in the map until then, and every retry would go there."""
        assert self._cluster is not None
        # No node answering yet is no news: the caller's retry comes back here.
        with contextlib.suppress(rex.RedisError, rex.RedisClusterException):
            await self._cluster.nodes_manager.initialize()

    def _connection(self, node: str) -> AbstractConnection:
        conn = own_connection(self._client, node or None)
        self._open.add(conn)
        return conn

    async def aclose(self) -> None:
        await self._deadlines.aclose()
        conns, self._open, self._idle = self._open, set(), {}
        for conn in conns:
            await conn.disconnect()


def _longest_block_ms(socket_timeout_s: float | None) -> int | None:
    """How long a blocking command may block on these connections: less than their socket
    timeout, by a margin for the reply to arrive. A longer block would end in the client's
    timeout instead of the server's empty reply: a closed connection and an error for an
    idle stream, and an entry the server hands over just then left unseen in the consumer's
    pending list until it is reclaimed."""
    if socket_timeout_s is None:
        return None
    limit_ms = int(socket_timeout_s * 1000)
    return max(1, limit_ms - min(1000, limit_ms // 2))


async def _round_trip(
    conn: AbstractConnection, commands: Sequence[Sequence[Any]], raise_on_error: bool
) -> list[Any]:
    """Write the commands and read every reply; bounded by the caller (``_exchange``)
    with the connection's socket timeout, once for the whole exchange: redis-py starts a
    timer per read (and our connection one per write).

    Once connected, the exchange writes to the connection's stream and reads its parser
    directly: ``send_packed_command`` and ``read_response`` add checks and error mapping
    done here anyway (the caller closes the connection on any error), about 6 µs a round
    trip when it is not hot, on each of the three a lone task makes from submit to
    handler (enqueue, read, begin: ``docs/benchmarks.md``, "Light-load latency")."""
    try:
        if not conn.is_connected:  # connects and greets, as a first command would
            await conn.connect()  # type: ignore[no-untyped-call]
        # redis-py's own stream and parser (private names, there since redis-py 4.2)
        writer: Any = conn._writer
        parser: Any = conn._parser
        writer.writelines(conn.pack_commands(commands))
        await writer.drain()
        replies = []
        for _ in commands:
            reply = await parser.read_response()
            if raise_on_error and isinstance(reply, rex.ResponseError):
                raise reply
            replies.append(reply)
        return replies
    except OSError as exc:  # the socket's own error, mapped as redis-py's connection does
        raise rex.ConnectionError(f"Error while talking to Redis: {exc}") from exc


def _merged(n: int, groups: dict[str, list[int]], parts: list[list[Any]]) -> list[Any]:
    """The parts' replies back in the order of the ``n`` commands."""
    if len(parts) == 1:
        return parts[0]
    replies: list[Any] = [None] * n
    for at, part in zip(groups.values(), parts, strict=True):
        for i, reply in zip(at, part, strict=True):
            replies[i] = reply
    return replies


def _key(command: Sequence[Any]) -> Any:
    """The key that places a command: every command sent here names keys of one slot."""
    name = command[0].upper()
    if name in ("EVALSHA", "EVAL"):
        return command[3]  # after the script and the number of keys
    if name == "XREADGROUP":
        return command[list(command).index("STREAMS") + 1]
    return command[1]
