"""Delegation against real worker processes (issue 33's must-show): a parent of one agent
type fans out to 10 children of another (``limit=3``) on other shards; ``kill -9`` of the
parent's worker while its children run still ends with one parent result and 10
children, none submitted or run twice; the same on Redis Cluster; cancelling a parent
with running children ends each ``cancelled`` once; an end lost between a child's commit
and its parent's wake-up is delivered by the parent shard's sweep."""

from __future__ import annotations

import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis, RedisCluster

from deepagents.config import Settings, load_config
from deepagents.contract import ErrorCode, ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from deepagents.transport.redis_streams import connect
from deepagents.worker import Upstream, Worker
from tests.e2e.conftest import committed_events, registered, worker_procs
from tests.support.delegation import HelperAgent, ParentAgent, most_at_once
from tests.support.procs import Procs
from tests.support.replies import entries
from tests.support.wait import eventually
from tests.support.workers import running

CONFIG = """
tiers:
  p2: {concurrency: 10, max_wait_ms: 600000}
default_tier: p2
defaults:
  max_deliveries: 10
  visibility_timeout_ms: 1000
  block_ms: 200
  grace_period_s: 5
  retry: {base_ms: 20, max_ms: 200}
delegation: {sweep_s: %s}
agents:
  parent: {class: "tests.support.delegation:ParentAgent", settings: {shards: 2}}
  helper: {class: "tests.support.delegation:HelperAgent", settings: {shards: 3}}
"""
PARENT, HELPER = "tests.support.delegation:ParentAgent", "tests.support.delegation:HelperAgent"


def _config(tmp_path: Path, sweep_s: float = 30) -> Path:
    path = tmp_path / "delegation.yaml"
    path.write_text(CONFIG % sweep_s)
    return path


@pytest.fixture
def delegation_procs(redis_url: str, prefix: str, tmp_path: Path, client: Redis) -> Iterator[Procs]:
    p = worker_procs(redis_url, prefix, _config(tmp_path))
    try:
        yield p
    finally:
        p.close()


def _lines(path: Path) -> list[str]:
    if not path.exists():
        return []
    text = path.read_text()  # a half-written last line counts once it is whole
    return text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]


def _started(path: Path) -> list[str]:
    return [line.split()[1] for line in _lines(path) if line.startswith("start ")]


def _ended(path: Path) -> int:
    return sum(1 for line in _lines(path) if line.startswith("end "))


async def _submitted(client: Redis, prefix: str, agent: str, shards: int) -> Counter[str]:
    """How many times each task of ``agent`` was enqueued (its ``submitted`` events)."""
    out: Counter[str] = Counter()
    for shard in range(shards):
        for _, fields in await entries(client, f"{prefix}:{{{agent}:{shard}}}:audit"):
            for event in orjson.loads(fields[b"events"]):
                if event["type"] == "submitted":
                    out[event["task_id"]] += 1
    return out


async def _story(
    orch: Orchestrator,
    parent_id: str,
    effects: Path,
    procs: Procs,
    workers: list[subprocess.Popen[bytes]],
) -> str:
    """What a failed wait saw: the parent and its children as stored, the children's start
    and end lines, and each worker's exit code and last log lines."""
    info = await orch.lookup(parent_id) or {}
    children = str(info.get("children", "")).split()
    states = {c: (await orch.lookup(c) or {}).get("state") for c in children}
    logs = [f"worker {w.args!r} exit={w.poll()}:\n{procs.output(w)}" for w in workers]
    return "\n".join(
        [f"parent: {info}", f"children: {states}", f"effects: {_lines(effects)}", *logs]
    )


async def test_kill_9_of_the_parent_s_worker_ends_with_one_result_and_ten_children(
    client: Redis, prefix: str, tmp_path: Path, delegation_procs: Procs
) -> None:
    effects, runs = tmp_path / "effects", tmp_path / "runs"
    config = load_config(_config(tmp_path))
    parent = delegation_procs.worker(PARENT)
    delegation_procs.worker(HELPER)
    await registered(client, prefix, "parent", 1)
    await registered(client, prefix, "helper", 1)
    payload = {"n": 10, "limit": 3, "sleep": 0.4, "effects": str(effects), "runs": str(runs)}
    async with Orchestrator.from_client(
        client, config=config, settings=Settings(prefix=prefix)
    ) as orch:
        task = Task(intent="fanout", payload=payload, tenant="acme")
        # as the gateway does: the submitting tenant owns the task (GET /v1/tasks/{id})
        await client.set(orch.tasks.owner_key(task.task_id), "acme")
        handle = await orch.submit(task)
        for ended in (1, 5):  # twice, while children run: kill the parent's worker

            async def running_children(ended: int = ended) -> bool:
                return _ended(effects) >= ended and len(_started(effects)) > _ended(effects)

            await eventually(running_children, timeout=60, what=f"{ended} children ended")
            parent.send_signal(signal.SIGKILL)
            parent.wait(10)
            parent = delegation_procs.worker(PARENT)
        result = await handle.result(timeout=120)
        info = await orch.lookup(handle.task_id)
        owners = {await orch.tasks.owner(c) for c in result.output["children"]}
    assert owners == {"acme"}  # the tenant reads its children by id, as it reads the parent
    assert result.status is ResultStatus.SUCCESS, result.error
    children = result.output["children"]
    assert len(set(children)) == 10 and result.output["statuses"] == ["success"] * 10
    assert [o["i"] for o in result.output["outputs"]] == list(range(10))
    assert {o["tenant"] for o in result.output["outputs"]} == {"acme"}
    assert result.metrics.tokens_used == 100  # the children's spend, rolled up
    assert info is not None and info["children"].split() == children
    # each child submitted once, ran once; never more than 3 at a time
    assert await _submitted(client, prefix, "helper", 3) == Counter(dict.fromkeys(children, 1))
    assert sorted(_started(effects)) == sorted(children)
    assert most_at_once(_lines(effects)) <= 3
    # one parent result, and one per child, in the commit ledger
    parents = await committed_events(client, prefix, "parent", 2)
    assert [len(parents[handle.task_id])] == [1]
    kids = await committed_events(client, prefix, "helper", 3)
    assert sorted(kids) == sorted(children) and {len(v) for v in kids.values()} == {1}
    assert {e["agent"] for v in kids.values() for e in v} == {"helper"}
    # the CLI shows the parent with its children, and refuses an unknown id in one line
    shown = delegation_procs.run("tasks", "show", handle.task_id, "--json")
    assert shown.returncode == 0, shown.stderr
    view = orjson.loads(shown.stdout)
    assert view["state"] == "done" and view["result"]["status"] == "success"
    assert [c["task_id"] for c in view["children"]] == children
    assert {c["state"] for c in view["children"]} == {"done"}
    child = orjson.loads(delegation_procs.run("tasks", "show", children[0], "--json").stdout)
    assert (child["parent_id"], child["agent"]) == (handle.task_id, "helper")


async def test_cancelling_a_parent_with_running_children_ends_each_cancelled_once(
    client: Redis, prefix: str, tmp_path: Path, delegation_procs: Procs
) -> None:
    effects = tmp_path / "effects"
    config = load_config(_config(tmp_path))
    workers = [delegation_procs.worker(PARENT), delegation_procs.worker(HELPER)]
    await registered(client, prefix, "parent", 1)
    await registered(client, prefix, "helper", 1)
    payload = {"n": 6, "limit": 4, "sleep": 3600, "effects": str(effects)}
    async with Orchestrator.from_client(
        client, config=config, settings=Settings(prefix=prefix, outbox=True)
    ) as orch:
        handle = await orch.submit(Task(intent="fanout", payload=payload))

        async def four_running() -> bool:
            # Distinct ids: on a loaded machine a late heartbeat (1 s visibility timeout here)
            # can let a running child be reclaimed and started again, so the list of starts
            # may pass four without ever being four.
            return len(set(_started(effects))) == 4

        try:
            await eventually(four_running, timeout=60, what="four running children")
        except AssertionError as exc:  # seen twice in full runs, never alone: say why
            raise AssertionError(
                await _story(orch, handle.task_id, effects, delegation_procs, workers)
            ) from exc
        await eventually(
            lambda: _is(orch, handle.task_id, "waiting"), timeout=30, what="the parent parked"
        )
        assert await orch.cancel(handle.task_id) == "ok"
        parent = await handle.result(timeout=30)
        info = await orch.lookup(handle.task_id)
        assert info is not None
        children = info["children"].split()
        assert len(children) == 4  # the other two were never submitted
        for child in children:
            got = await orch.get_result(child)
            assert got is not None and got.error is not None
            assert got.error.code == ErrorCode.CANCELLED
            assert await orch.cancel(child) == "done"
    assert parent.error is not None and parent.error.code == ErrorCode.CANCELLED
    kids = await committed_events(client, prefix, "helper", 3)
    assert sorted(kids) == sorted(children)
    assert all(len(v) == 1 and v[0]["reason"] == ErrorCode.CANCELLED for v in kids.values())


async def test_cancelling_a_running_parent_cancels_its_running_child(
    client: Redis, prefix: str, tmp_path: Path, delegation_procs: Procs
) -> None:
    effects, runs = tmp_path / "effects", tmp_path / "runs"
    config = load_config(_config(tmp_path))
    delegation_procs.worker(PARENT)
    delegation_procs.worker(HELPER)
    await registered(client, prefix, "parent", 1)
    await registered(client, prefix, "helper", 1)
    # Two children at once, the first ends at once: the parent is woken and runs again (for
    # an hour) while the second child runs (for an hour).
    payload = {"n": 3, "limit": 2, "sleeps": [0, 3600, 3600], "hold": 3600,
               "effects": str(effects), "runs": str(runs)}  # fmt: skip
    async with Orchestrator.from_client(
        client, config=config, settings=Settings(prefix=prefix, outbox=True)
    ) as orch:
        handle = await orch.submit(Task(intent="fanout", payload=payload))

        async def running_again() -> bool:
            return len(_lines(runs)) == 2 and await _is(orch, handle.task_id, "running")

        await eventually(running_again, timeout=60, what="the parent's second run")
        info = await orch.lookup(handle.task_id)
        assert info is not None
        first, second = info["children"].split()
        assert await _is(orch, second, "running")
        assert await orch.cancel(handle.task_id) == "ok"
        parent = await handle.result(timeout=30)
        got = await orch.get_result(second)
        assert got is not None and got.error is not None
        assert got.error.code == ErrorCode.CANCELLED
        assert await orch.cancel(second) == "done"
        done = await orch.get_result(first)
        assert done is not None and done.status is ResultStatus.SUCCESS

        async def all_acked() -> bool:
            for agent, shards in (("parent", 2), ("helper", 3)):
                for shard in range(shards):
                    name = f"{prefix}:{{{agent}:{shard}}}:p2"
                    if (
                        await client.exists(name)
                        and (await client.xpending(name, agent))["pending"]
                    ):
                        return False
            return True

        await eventually(all_acked, timeout=30, what="both runs stopped, their entries acked")
    assert parent.error is not None and parent.error.code == ErrorCode.CANCELLED
    kids = await committed_events(client, prefix, "helper", 3)
    assert sorted(kids) == sorted([first, second])  # the third never submitted
    assert [e["reason"] for e in kids[second]] == [ErrorCode.CANCELLED]
    assert _ended(effects) == 1  # the second child's run was stopped, not finished
    assert len(_lines(runs)) == 2


async def _is(orch: Orchestrator, task_id: str, state: str) -> bool:
    return await orch.task_state(task_id) == state


async def test_an_end_lost_after_the_child_s_commit_is_delivered_by_the_sweep(
    client: Redis, prefix: str, tmp_path: Path
) -> None:
    """The helper's worker is started without an orchestrator: its commits land, but no
    end reaches the parent (as if it died right after each commit). The parent's shard
    sweeps its wait every 0.3 s, finds the children ended and wakes it, once."""
    effects = tmp_path / "effects"
    config = load_config(_config(tmp_path, sweep_s=0.3))
    settings = Settings(prefix=prefix, outbox=True)
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        parent = Worker.from_client(
            ParentAgent(),
            client=client,
            config=config,
            settings=settings,
            upstream=Upstream(parentage=orch),
        )
        helper = Worker.from_client(HelperAgent(), client=client, config=config, settings=settings)
        async with running(parent), running(helper):
            payload = {"n": 3, "sleep": 0.0, "effects": str(effects)}
            handle = await orch.submit(Task(intent="fanout", payload=payload))
            result = await handle.result(timeout=60)
    assert result.status is ResultStatus.SUCCESS, result.error
    assert result.output["statuses"] == ["success"] * 3
    assert sorted(_started(effects)) == sorted(result.output["children"])


async def test_a_child_on_another_agent_type_and_shard_works_on_redis_cluster(
    cluster_url: str, cluster: RedisCluster, prefix: str, tmp_path: Path
) -> None:
    effects = tmp_path / "effects"
    path = _config(tmp_path)
    procs = worker_procs(cluster_url, prefix, path, DEEPAGENTS_REDIS_CLUSTER="true")
    client = connect(cluster_url, cluster=True)
    try:
        procs.worker(PARENT)
        procs.worker(HELPER)
        await registered(client, prefix, "parent", 1)
        await registered(client, prefix, "helper", 1)
        settings = Settings(redis_url=cluster_url, redis_cluster=True, prefix=prefix)
        async with Orchestrator.from_client(
            client, config=load_config(path), settings=settings
        ) as orch:
            payload = {"n": 10, "limit": 3, "sleep": 0.05, "effects": str(effects)}
            handle = await orch.submit(Task(intent="fanout", payload=payload))
            result = await handle.result(timeout=120)
            shards = {(await orch.lookup(c) or {}).get("shard") for c in result.output["children"]}
    finally:
        procs.close()
        await client.aclose()
    assert result.status is ResultStatus.SUCCESS, result.error
    assert result.output["statuses"] == ["success"] * 10
    assert len(shards) > 1  # the children sit on several slots, apart from the parent's
    assert sorted(_started(effects)) == sorted(result.output["children"])
    assert most_at_once(_lines(effects)) <= 3
