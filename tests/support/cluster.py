"""Redis Cluster for tests: redis-servers in cluster mode, sharing out the 16,384 slots.

A node refuses any command whose keys span slots (CROSSSLOT), whatever the node count, so
one node tests that; two test what only several can show: commands split by node, results
published on one node and read on another, a slot moving under a running worker."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from functools import partial

import redis

from deepagents._internal.redis_server import EmbeddedRedis, free_port
from tests.support.wait import eventually_sync

SLOTS = 16_384
# A primary starts a replica's sync at once (Redis waits 5 s by default, for more replicas
# to share one diskless transfer) and pings its replicas every second (not every 10 s): a
# cluster lists a replica in CLUSTER SLOTS only once its replication offset has moved, which
# on an idle primary takes that ping. Together about 10 s of every test that adds a replica.
FAST_REPLICAS = ("--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1")


@contextlib.contextmanager
def running_cluster(nodes: int) -> Iterator[list[EmbeddedRedis]]:
    """``nodes`` primaries, each owning an equal run of slots, all knowing each other."""
    args = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", *FAST_REPLICAS)
    with contextlib.ExitStack() as stack:
        servers = [
            stack.enter_context(EmbeddedRedis(extra_args=args, port=_cluster_port()))
            for _ in range(nodes)
        ]
        clients = [stack.enter_context(redis.Redis(port=s.port)) for s in servers]
        for i, client in enumerate(clients):
            # ADDSLOTS, not ADDSLOTSRANGE: Redis 6.2 knows only this one.
            client.execute_command("CLUSTER", "ADDSLOTS", *range(*_run(i, nodes)))
            if i:
                client.execute_command("CLUSTER", "MEET", "127.0.0.1", servers[0].port)
        for client in clients:
            eventually_sync(partial(_ready, client, nodes), what="the cluster to form")
        yield servers


@contextlib.contextmanager
def replica_of(primary: EmbeddedRedis) -> Iterator[EmbeddedRedis]:
    """A new node that joins ``primary``'s cluster as its replica, in sync when yielded."""
    args = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", *FAST_REPLICAS)
    with (
        EmbeddedRedis(extra_args=args, port=_cluster_port()) as replica,
        redis.Redis(port=primary.port) as src,
        redis.Redis(port=replica.port) as client,
    ):
        client.execute_command("CLUSTER", "MEET", "127.0.0.1", primary.port)
        primary_id = src.execute_command("CLUSTER", "MYID")

        def known() -> bool:
            nodes = client.execute_command("CLUSTER", "NODES")
            return primary_id in (nodes if isinstance(nodes, bytes) else str(nodes).encode())

        eventually_sync(known, what="the replica to meet the primary")
        client.execute_command("CLUSTER", "REPLICATE", primary_id)
        eventually_sync(
            lambda: client.info("replication").get("master_link_status") == "up",
            what="the replica to sync",
        )

        def listed() -> bool:  # clients learn of the replica from the primary's CLUSTER SLOTS
            slots = src.execute_command("CLUSTER", "SLOTS")
            return any(int(node[1]) == replica.port for row in slots for node in row[3:])

        eventually_sync(listed, what="the primary to list its replica")
        yield replica


def move_slot(slot: int, source: EmbeddedRedis, target: EmbeddedRedis) -> None:
    """Reshard one slot, keys and all, as ``redis-cli --cluster reshard`` does."""
    with redis.Redis(port=source.port) as src, redis.Redis(port=target.port) as dst:
        src_id, dst_id = (c.execute_command("CLUSTER", "MYID") for c in (src, dst))
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
            src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
        for client in (src, dst):
            client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)


def owner(slot: int, servers: list[EmbeddedRedis]) -> EmbeddedRedis:
    """The node serving ``slot``, as the nodes see it."""
    with redis.Redis(port=servers[0].port) as client:
        for start, end, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return next(s for s in servers if s.port == int(primary[1]))
    raise AssertionError(f"no node serves slot {slot}")


def _run(i: int, nodes: int) -> tuple[int, int]:
    return i * SLOTS // nodes, (i + 1) * SLOTS // nodes


def _ready(client: redis.Redis, nodes: int) -> bool:
    # redis-py leaves execute_command unannotated.
    info = client.execute_command("CLUSTER", "INFO")  # type: ignore[no-untyped-call]
    info = info.decode() if isinstance(info, bytes) else str(info)
    return "cluster_state:ok" in info and f"cluster_known_nodes:{nodes}" in info


def _cluster_port() -> int:
    """A free port whose cluster bus port (10,000 above it) is valid and free too."""
    while True:
        port = free_port()
        if port + 10_000 <= 65_535:
            with contextlib.suppress(OSError), socket.socket() as sock:
                sock.bind(("127.0.0.1", port + 10_000))
                return port
