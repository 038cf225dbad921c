"""Failover to a replica that lags (RELIABILITY row 24). Redis replicates asynchronously:
a submit acknowledged by the primary alone is lost if the primary dies before its
replica has it. With ``DEEPAGENTS_MIN_REPLICAS=1`` a submit is acknowledged only once a
replica confirmed it (``WAIT``), and otherwise fails with ``NotReplicated``, naming the
tasks to resend with their idempotency key. Every acknowledged task survives the failover.

The replica follows the primary through a proxy; silencing the proxy is the lag (a
network partition between them): nothing the primary writes from then on reaches it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.config import FileConfig, Settings
from deepagents.contract import ResultStatus, Task
from deepagents.errors import NotReplicated, TransportError
from deepagents.orchestrator import Orchestrator, TaskHandle
from deepagents.transport.redis_streams import connect
from tests.support.cluster import FAST_REPLICAS
from tests.support.proxy import SilencingProxy
from tests.support.wait import eventually
from tests.support.workers import running_worker

pytestmark = pytest.mark.slow


class Pair:
    """A primary and a replica following it through ``link``."""

    def __init__(self, primary: EmbeddedRedis, replica: EmbeddedRedis, link: SilencingProxy):
        self.primary, self.replica, self.link = primary, replica, link


@contextlib.asynccontextmanager
async def _pair(
    primary_args: tuple[str, ...] = (), replica_args: tuple[str, ...] = ()
) -> AsyncIterator[Pair]:
    """A primary, and a replica following it through a proxy; yielded once the replica is
    in sync and, where the primary is given ``min-replicas-to-write``, counts as good."""
    with EmbeddedRedis(extra_args=(*FAST_REPLICAS, *primary_args)) as primary:
        link = SilencingProxy("127.0.0.1", primary.port)
        await link.start()
        port = link.url.rsplit(":", 1)[1].split("/")[0]
        follow = ("--replicaof", "127.0.0.1", port, *replica_args)
        try:
            with EmbeddedRedis(extra_args=follow) as replica:
                client = connect(primary.url)
                try:

                    async def good() -> bool:
                        info = await client.info("replication")
                        online = info.get("slave0", {}).get("state") == "online"
                        return online and int(info.get("min_slaves_good_slaves", 1)) >= 1

                    async def acks() -> bool:
                        # "online" can come before the replica answers the primary's
                        # GETACK promptly: a test's first WAIT then timed out (seen in CI).
                        await client.set("pair:probe", "1")
                        return await client.wait(1, 200) >= 1

                    await eventually(good, what="the replica to follow the primary")
                    await eventually(acks, what="the replica to confirm a write")
                    await client.delete("pair:probe")
                finally:
                    await client.aclose()
                yield Pair(primary, replica, link)
        finally:
            await link.close()


@pytest.fixture
async def pair() -> AsyncIterator[Pair]:
    async with _pair() as running:
        yield running


def _echo(n: int) -> list[Task]:
    return [Task(intent="echo", payload={"i": i}) for i in range(n)]


async def _exists(orch: Orchestrator, task_id: str) -> bool:
    info = await orch.lookup(task_id)
    return info is not None and "state" in info


async def test_acknowledged_submits_survive_failover_to_a_lagging_replica(
    pair: Pair, prefix: str, config: FileConfig
) -> None:
    plain = Settings(redis_url=pair.primary.url, prefix=prefix, outbox=True)
    safe = plain.model_copy(update={"min_replicas": 1, "replica_wait_ms": 300})
    acknowledged: list[str] = []  # by a submit that waited for the replica
    unconfirmed: list[str] = []  # written to the primary; the submit said NotReplicated
    primary_only: list[str] = []  # acknowledged by the primary alone (min_replicas 0)
    client = connect(pair.primary.url)
    try:
        async with (
            Orchestrator.from_client(client, config=config, settings=safe) as orch,
            Orchestrator.from_client(client, config=config, settings=plain) as unsafe,
        ):
            acknowledged += [h.task_id for h in await orch.submit_many(_echo(100))]
            pair.link.silence()  # the replica falls behind from here on
            for _ in range(3):
                with pytest.raises(NotReplicated, match="0 of 1 replica") as refused:
                    await orch.submit_many(_echo(10))
                unconfirmed += refused.value.task_ids
            primary_only += [h.task_id for h in await unsafe.submit_many(_echo(50))]
    finally:
        await client.aclose()
    assert pair.primary.process is not None
    pair.primary.process.kill()  # the primary dies; the replica is promoted
    pair.primary.process.wait(10)
    promoted = connect(pair.replica.url)
    try:
        await promoted.replicaof("NO", "ONE")
        settings = Settings(redis_url=pair.replica.url, prefix=prefix, outbox=True)
        async with (
            running_worker(promoted, settings, config),
            Orchestrator.from_client(promoted, config=config, settings=settings) as orch,
        ):

            async def all_done() -> bool:
                results = [await orch.get_result(t) for t in acknowledged]
                return all(r is not None for r in results)

            await eventually(all_done, timeout=60, what="every acknowledged task done")
            results = [await orch.get_result(t) for t in acknowledged]
            assert all(r is not None and r.status is ResultStatus.SUCCESS for r in results)
            # What the submitters were not told was safe is what the failover lost: the
            # NotReplicated tasks, and (the danger the setting removes) every task the
            # primary alone acknowledged after the replica fell behind.
            assert len(unconfirmed) == 30 and len(primary_only) == 50
            lost = [t for t in unconfirmed + primary_only if not await _exists(orch, t)]
            assert lost == unconfirmed + primary_only
    finally:
        await promoted.aclose()


async def test_min_replicas_without_a_replica_refuses_after_the_wait(
    client: Redis, prefix: str, config: FileConfig, settings: Settings
) -> None:
    safe = settings.model_copy(update={"min_replicas": 1, "replica_wait_ms": 50})
    async with Orchestrator.from_client(client, config=config, settings=safe) as orch:
        with pytest.raises(NotReplicated) as refused:
            await orch.submit_many(_echo(3))
    assert len(refused.value.task_ids) == 3
    assert "resend them with the same idempotency key" in str(refused.value)


@pytest.fixture
async def guarded_pair() -> AsyncIterator[Pair]:
    """As ``pair``, the primary configured to refuse writes while it has no replica that
    acknowledged within the last second (``min-replicas-to-write``): an old primary cut off
    from the rest cannot take writes that a failover on the other side would lose. The
    replica gives up a silent link after 2 s and connects again."""
    guard = ("--min-replicas-to-write", "1", "--min-replicas-max-lag", "1")
    async with _pair(guard, ("--repl-timeout", "2")) as running:
        yield running


async def test_a_primary_cut_off_from_its_replicas_refuses_writes_until_they_return(
    guarded_pair: Pair, prefix: str, config: FileConfig
) -> None:
    pair = guarded_pair
    settings = Settings(redis_url=pair.primary.url, prefix=prefix, outbox=True)
    client = connect(pair.primary.url)
    accepted: list[TaskHandle] = []
    try:
        async with (
            running_worker(client, settings, config),  # its reads are refused too
            Orchestrator.from_client(client, config=config, settings=settings) as orch,
        ):

            async def submitted() -> bool:
                try:
                    accepted.extend(await orch.submit_many(_echo(20)))
                except TransportError:
                    return False  # the replica has not acknowledged yet
                return True

            await eventually(submitted, what="the primary to take writes")
            pair.link.silence()  # a partition: the primary hears from no replica

            async def refusing() -> bool:
                try:
                    accepted.extend(await orch.submit_many(_echo(20)))
                except TransportError as exc:
                    assert "NOREPLICAS" in str(exc) and exc.retryable, exc
                    return True
                return False

            await eventually(refusing, what="the isolated primary to refuse writes")
            # The replica gives up the silent link and connects again: the partition heals.
            await eventually(submitted, timeout=60, what="writes taken again")
            results = await asyncio.gather(*(h.result(timeout=60) for h in accepted))
        assert all(r.status is ResultStatus.SUCCESS for r in results)
        assert len({h.task_id for h in accepted}) == len(accepted)
    finally:
        await client.aclose()
