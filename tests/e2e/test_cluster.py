"""The runtime on Redis Cluster: the same code with a cluster client (``cluster_url``: a
redis-server in cluster mode, which refuses any command whose keys span slots).

Workers and the CLI switch with ``DEEPAGENTS_REDIS_CLUSTER=true``; an embedding service
passes ``connect(url, cluster=True)``'s client. Each shard has its own hash tag, so the
shards of an agent type sit in different slots."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import orjson
import pytest
import redis
from redis.asyncio import Redis, RedisCluster
from redis.crc import key_slot

from agents.echo import EchoAgent
from deepagents.config import FileConfig, Settings
from deepagents.contract import ResultStatus, Task
from deepagents.errors import IdempotencyConflict, RedisNotSafe
from deepagents.orchestrator import Orchestrator
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams import connect
from deepagents.worker import Worker
from tests.agents import LabAgent
from tests.e2e.conftest import kill_9_mid_run, registered, worker_procs
from tests.support.procs import Procs
from tests.support.wait import eventually

SHARDS = 2  # E2E_CONFIG's shard count


@pytest.fixture
async def client(cluster_url: str, cluster: RedisCluster) -> AsyncIterator[Redis]:
    """What the runtime gets: ``connect``'s cluster client (``cluster`` cleans up)."""
    runtime = connect(cluster_url, cluster=True)
    try:
        yield runtime
    finally:
        await runtime.aclose()


@pytest.fixture
def settings(cluster_url: str, prefix: str) -> Settings:
    return Settings(redis_url=cluster_url, redis_cluster=True, prefix=prefix, outbox=True)


@pytest.fixture
def procs(cluster_url: str, prefix: str, config_path: Path, client: Redis) -> Iterator[Procs]:
    p = worker_procs(cluster_url, prefix, config_path, DEEPAGENTS_REDIS_CLUSTER="true")
    try:
        yield p
    finally:
        p.close()


def test_the_test_server_refuses_keys_of_two_slots(cluster_url: str) -> None:
    # What the cluster tests lean on: this server enforces slots, as a real cluster does.
    node = redis.Redis.from_url(cluster_url)
    try:
        with pytest.raises(redis.ResponseError, match="same slot"):
            node.mget("{a}x", "{b}y")
    finally:
        node.close()


def test_the_shards_of_an_agent_sit_in_different_slots(prefix: str) -> None:
    keys = [Keys(prefix).shard("lab", shard) for shard in range(SHARDS)]
    assert len({key_slot(k.stream("p2").encode()) for k in keys}) == SHARDS


async def test_kill_9_on_a_cluster_loses_nothing_and_commits_once(
    client: Redis, orch: Orchestrator, procs: Procs, prefix: str
) -> None:
    handles = await kill_9_mid_run(client, orch, procs, prefix, shards=SHARDS)
    assert {h.shard for h in handles} == set(range(SHARDS)), "both shards, both slots"


async def test_publish_cli_on_a_cluster(procs: Procs, client: Redis, prefix: str) -> None:
    procs.worker("agents.echo:EchoAgent")
    await registered(client, prefix, "echo", 1)
    done = await asyncio.to_thread(
        procs.run, "publish", "--intent", "echo", "--payload", '{"hello": 1}', "--wait", "30"
    )
    assert done.returncode == 0, done.stderr
    result = orjson.loads(done.stdout)
    assert result["status"] == "success"
    assert result["output"] == {"hello": 1}


async def test_dead_letter_status_exporter_and_replay_on_a_cluster(
    client: Redis, config: FileConfig, settings: Settings, procs: Procs, prefix: str
) -> None:
    worker = Worker.from_client(
        LabAgent(client, prefix), client=client, config=config, settings=settings
    )
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.ready.wait(), 30)
        async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
            poison = await orch.submit(Task(intent="lab", payload={"fail_until_fixed": True}))
            failed = await poison.result(timeout=30)
            assert failed.error is not None and failed.error.code == "dead_lettered"

            listing = await asyncio.to_thread(procs.run, "dlq", "list", "--json")
            assert listing.returncode == 0, listing.stderr
            (dead,) = orjson.loads(listing.stdout)
            assert dead["task_id"] == poison.task_id and dead["reason"] == "max_deliveries"
            status = await asyncio.to_thread(procs.run, "status", "--json")
            assert status.returncode == 0, status.stderr
            rows = orjson.loads(status.stdout)
            # One row per tier and shard; a shard's dead letters show on each of its rows.
            assert sum(r["dead_letters"] for r in rows if r["tier"] == "p2") == 1
            sample = await asyncio.to_thread(procs.run, "exporter", "--once")
            assert sample.returncode == 0, sample.stderr
            assert "deepagents_dead_letters" in sample.stdout

            await client.set(f"{prefix}:fixed", 1)
            replay = await asyncio.to_thread(procs.run, "dlq", "replay", dead["entry_id"])
            assert replay.returncode == 0, replay.stderr

            async def done() -> bool:
                info = await orch.lookup(poison.task_id)
                return info is not None and info["state"] == "done"

            await eventually(done, timeout=30, what="the replayed task to complete")
            final = await orch.get_result(poison.task_id)
            assert final is not None and final.status is ResultStatus.SUCCESS
    finally:
        worker.stop()
        await asyncio.wait_for(running, 30)


async def test_a_primary_that_evicts_is_refused(
    client: Redis, cluster: RedisCluster, config: FileConfig, settings: Settings
) -> None:
    everywhere = RedisCluster.ALL_NODES
    await cluster.config_set("maxmemory-policy", "allkeys-lru", target_nodes=everywhere)
    try:
        worker = Worker.from_client(EchoAgent(), client=client, config=config, settings=settings)
        with pytest.raises(RedisNotSafe, match=r"maxmemory-policy is 'allkeys-lru' on 127"):
            await asyncio.wait_for(worker.run(), 30)
    finally:
        await cluster.config_set("maxmemory-policy", "noeviction", target_nodes=everywhere)


async def test_scripts_are_loaded_again_after_a_flush(
    client: Redis, cluster: RedisCluster, config: FileConfig, settings: Settings
) -> None:
    worker = Worker.from_client(EchoAgent(), client=client, config=config, settings=settings)
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.ready.wait(), 30)
        async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
            for round_ in range(2):
                handles = await orch.submit_many(
                    [Task(intent="echo", payload={"i": i}) for i in range(50)]
                )
                results = await asyncio.gather(*(h.result(timeout=30) for h in handles))
                assert all(r.status is ResultStatus.SUCCESS for r in results), round_
                # Every node forgets every script: enqueue, begin and commit load them again.
                await cluster.execute_command("SCRIPT FLUSH", target_nodes=RedisCluster.ALL_NODES)
    finally:
        worker.stop()
        await asyncio.wait_for(running, 30)
    assert worker.stats.committed == 100
    assert worker.stats.duplicates == 0


async def test_a_refused_batch_releases_its_idempotency_keys_on_a_cluster(
    client: Redis, orch: Orchestrator, prefix: str
) -> None:
    """Issue 39: the compare-and-delete release runs on a cluster client too (each key in
    a slot of its own)."""
    await orch.submit(Task(intent="echo", payload={"v": 1}, tenant="t", idempotency_key="k1"))
    batch = [
        Task(intent="echo", payload={"v": 2}, tenant="t", idempotency_key="k2"),
        Task(intent="echo", payload={"v": 3}, tenant="t", idempotency_key="k1"),
    ]
    with pytest.raises(IdempotencyConflict):
        await orch.submit_many(batch)
    keys = Keys(prefix)
    assert not await client.exists(keys.idempotency("k2", "t"))
    assert await client.exists(keys.idempotency("k1", "t"))
