"""A Redis Cluster primary killed with ``-9`` and its replica promoted: a running worker
and a submitter, both on the cluster client, find the new primary and carry on. Tasks
acknowledged before the failover and replicated complete, those running at the kill
included; every task is committed once, counted per task id in the outbox."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from collections.abc import Iterator
from functools import partial
from typing import Any

import orjson
import pytest
import redis
from redis.asyncio import Redis
from redis.crc import key_slot

from agents.echo import EchoAgent
from deepagents import Result
from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import FileConfig, Settings, parse_config
from deepagents.contract import ResultStatus, Task
from deepagents.errors import NotReplicated, TransportError
from deepagents.orchestrator import Orchestrator, TaskHandle
from deepagents.transport.keys import Keys, shard_of
from deepagents.transport.redis_streams import connect
from deepagents.transport.redis_streams.lanes import Lanes
from tests.support.cluster import owner, replica_of, running_cluster
from tests.support.wait import eventually, eventually_sync
from tests.support.workers import running_worker

pytestmark = pytest.mark.slow

# Five at a time, so that 100 tasks of 0.2 s take seconds: with the default pool of 100 they
# all ran at once and committed in one batch, and "some done, some running" was never seen.
CONFIG = """
tiers:
  p2: {concurrency: 5, max_wait_ms: 120000}
default_tier: p2
defaults: {shards: 2, block_ms: 200, visibility_timeout_ms: 2000}
agents: {echo: {class: "agents.echo:EchoAgent"}}
"""


@pytest.fixture
def pair() -> Iterator[tuple[EmbeddedRedis, EmbeddedRedis]]:
    with running_cluster(1) as (primary,), replica_of(primary) as replica:
        yield primary, replica


def _promote(replica: EmbeddedRedis) -> None:
    with redis.Redis(port=replica.port) as client:
        client.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")

        def serving() -> bool:
            info = client.execute_command("CLUSTER", "INFO").decode()
            return client.info("replication")["role"] == "master" and "cluster_state:ok" in info

        eventually_sync(serving, what="the replica to take over")


class SlowEcho(EchoAgent):
    """Echo after a short sleep, so that tasks are still running when the primary dies."""

    async def execute(self, context: dict[str, Any]) -> Result:
        await asyncio.sleep(0.2)
        return await super().execute(context)


async def _commits(client: Redis, prefix: str) -> Counter[str]:
    """Commits per task id, as the outbox records them: one outcome event per commit."""
    counts: Counter[str] = Counter()
    for shard in range(2):
        entries: Any = await client.xrange(Keys(prefix).shard("echo", shard).outbox)
        for _, fields in entries:
            for event in orjson.loads(fields[b"events"]):
                if event["type"] == "succeeded":
                    counts[event["task_id"]] += 1
    return counts


async def test_worker_and_submitter_follow_a_failover(
    pair: tuple[EmbeddedRedis, EmbeddedRedis], prefix: str
) -> None:
    primary, replica = pair
    config: FileConfig = parse_config(CONFIG)
    settings = Settings(redis_url=primary.url, redis_cluster=True, prefix=prefix, outbox=True)
    # Before the kill an acknowledged task is on the replica (min_replicas), so the failover
    # cannot lose it; after it, the new primary has no replica to wait for.
    replicated = settings.model_copy(update={"min_replicas": 1})
    client = connect(primary.url, cluster=True)
    try:
        async with (
            running_worker(client, settings, config, SlowEcho()) as worker,
            Orchestrator.from_client(client, config=config, settings=replicated) as first,
            Orchestrator.from_client(client, config=config, settings=settings) as orch,
        ):
            before = await first.submit_many(
                [Task(intent="echo", payload={"i": i}) for i in range(100)]
            )

            async def in_flight() -> bool:
                return 0 < worker.stats.committed < len(before)

            await eventually(in_flight, interval=0.01, what="some tasks done, some running")
            assert primary.process is not None
            primary.process.kill()
            primary.process.wait(10)
            assert worker.stats.committed < len(before), "nothing was in flight at the kill"
            _promote(replica)
            # A submit that raised may still have enqueued its task: it is retried with the
            # same task, and counted below like every other.
            tasks = [Task(intent="echo", payload={"after": i}) for i in range(100)]
            after: list[TaskHandle] = []

            async def submitted(task: Task) -> bool:
                try:
                    after.extend(await orch.submit_many([task]))
                except TransportError:  # retryable: the first may meet the dead node
                    return False
                return True

            for task in tasks:
                await eventually(partial(submitted, task), what="the submitter to follow")
            assert [h.task_id for h in after] == [t.task_id for t in tasks]
            handles = before + after
            results = await asyncio.gather(*(h.result(timeout=60) for h in handles))
            assert all(r.status is ResultStatus.SUCCESS for r in results)
            commits = await _commits(client, prefix)
        assert commits == {h.task_id: 1 for h in handles}, "a task committed twice or never"
    finally:
        await client.aclose()


async def test_lanes_find_the_new_primary_by_themselves(
    pair: tuple[EmbeddedRedis, EmbeddedRedis],
) -> None:
    """The worker's own connections (``Lanes``) refresh the map after a node is lost, with
    no other command on the client to do it for them."""
    primary, replica = pair
    client = connect(primary.url, cluster=True)
    lanes = Lanes(client)
    try:
        await lanes.pipeline([("SET", "{a}k", "1")])
        assert primary.process is not None
        primary.process.kill()
        primary.process.wait(10)
        _promote(replica)
        with pytest.raises(redis.exceptions.ConnectionError):
            await lanes.pipeline([("GET", "{a}k")])  # the map still names the dead node
        assert await lanes.pipeline([("GET", "{a}k")]) == [b"1"]
    finally:
        await lanes.aclose()
        await client.aclose()


async def test_lanes_find_the_new_primary_after_a_silent_one(
    pair: tuple[EmbeddedRedis, EmbeddedRedis],
) -> None:
    """A primary that stops answering (SIGSTOP: its socket stays open, nothing is refused)
    and its replica promoted: the exchange that meets the silent node times out, and that
    timeout refreshes the map as a lost connection does, so the next exchange reaches the
    new primary rather than time out on the silent one again."""
    primary, replica = pair
    # A short socket timeout, for a test of seconds (the bus's own is the read block + 10 s).
    client: Any = redis.asyncio.RedisCluster.from_url(primary.url, socket_timeout=1.0)
    lanes = Lanes(client)
    assert primary.process is not None
    try:
        assert await lanes.pipeline([("SET", "{a}k", "1"), ("WAIT", 1, 5_000)]) == [b"OK", 1]
        primary.process.send_signal(signal.SIGSTOP)
        _promote(replica)
        with pytest.raises(redis.exceptions.TimeoutError):
            await lanes.pipeline([("GET", "{a}k")])  # the map still names the silent node
        assert await lanes.pipeline([("GET", "{a}k")]) == [b"1"]
    finally:
        primary.process.send_signal(signal.SIGCONT)
        await lanes.aclose()
        await client.aclose()


async def test_min_replicas_waits_for_the_replicas_of_each_node(
    pair: tuple[EmbeddedRedis, EmbeddedRedis], prefix: str
) -> None:
    """On a cluster, each node's part of a submit ends with ``WAIT`` on its connection:
    an acknowledged task is on the replica; with the replica stalled, the submit fails
    and names why."""
    primary, replica = pair
    config = parse_config(CONFIG)
    settings = Settings(
        redis_url=primary.url, redis_cluster=True, prefix=prefix, min_replicas=1,
        replica_wait_ms=300,
    )  # fmt: skip
    client = connect(primary.url, cluster=True)
    try:
        async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
            tasks = [Task(intent="echo", payload={"i": i}) for i in range(50)]
            handles = await orch.submit_many(tasks)
            with redis.Redis(port=replica.port) as follower:
                follower.execute_command("READONLY")  # serve reads of its primary's slots
                keys = Keys(prefix)
                held = [
                    follower.exists(keys.shard("echo", h.shard).task(h.task_id)) for h in handles
                ]
            assert held == [1] * 50
            assert replica.process is not None
            replica.process.send_signal(signal.SIGSTOP)
            late = Task(intent="echo", payload={"late": True})
            try:
                with pytest.raises(NotReplicated, match="0 of 1 replica") as refused:
                    await orch.submit_many([late])
            finally:
                replica.process.send_signal(signal.SIGCONT)
            assert refused.value.task_ids == [late.task_id] and refused.value.retryable
    finally:
        await client.aclose()


def _split_task(prefix: str, servers: list[EmbeddedRedis], shards: int) -> tuple[Task, int]:
    """A task whose location record sits on one node and its stream on the other, and the
    index of the location's node."""
    keys = Keys(prefix)
    for _ in range(10_000):
        task = Task(intent="echo", payload={})
        stream = keys.shard("echo", shard_of(task.task_id, shards)).stream("p2")
        at = [
            servers.index(owner(key_slot(k.encode()), servers))
            for k in (keys.location(task.task_id), stream)
        ]
        if at[0] != at[1]:
            return task, at[0]
    raise AssertionError("no task id splits its keys across the nodes")


async def test_min_replicas_waits_for_location_records_on_their_own_node(prefix: str) -> None:
    """A task's location record (for lookups by id) may live on another node than the task.
    With that node's replica stalled, the submit fails before anything is enqueued, rather
    than acknowledge a task whose record a failover there could lose."""
    with (
        running_cluster(2) as servers,
        replica_of(servers[0]) as first,
        replica_of(servers[1]) as second,
    ):
        config = parse_config(CONFIG)
        settings = Settings(
            redis_url=servers[0].url, redis_cluster=True, prefix=prefix, min_replicas=1,
            replica_wait_ms=300,
        )  # fmt: skip
        client = connect(servers[0].url, cluster=True)
        try:
            async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
                await orch.submit_many([Task(intent="echo", payload={}) for _ in range(20)])
                task, node = _split_task(prefix, servers, shards=2)
                stalled = (first, second)[node]
                assert stalled.process is not None
                stalled.process.send_signal(signal.SIGSTOP)
                try:
                    with pytest.raises(NotReplicated, match="nothing was enqueued") as refused:
                        await orch.submit_many([task])
                finally:
                    stalled.process.send_signal(signal.SIGCONT)
                assert refused.value.task_ids == [task.task_id]
                route = Keys(prefix).shard("echo", shard_of(task.task_id, 2))
                assert await client.hget(route.task(task.task_id), "state") is None
                # With the replica back, the same task goes through.
                (handle,) = await orch.submit_many([task])
                assert handle.task_id == task.task_id
        finally:
            await client.aclose()
