"""LangGraph graphs run by real worker processes on the session's Redis.

- crash: the worker running a graph is killed with ``kill -9`` inside node 2, after node 2's
  tool call completed; another worker resumes the graph at node 2: node 1's side effect
  happened once, the tool call is not made again (its recorded result comes back), node 3
  runs once.
- fence: the worker running a graph is paused (SIGSTOP) inside node 2 until a peer has
  reclaimed the task and finished it; woken, its checkpoint writes are refused by the owner
  check and it runs no further node.
- interrupt: ``interrupt()`` parks the task through ``ctx.ask``; while it waits, another task
  runs on the tier's one slot; each reply resumes the graph with ``Command(resume=...)``,
  two questions in turn.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from deepagents.config import Settings, load_config
from deepagents.contract import ResultStatus
from deepagents.orchestrator import Orchestrator
from tests.e2e.conftest import registered, worker_procs
from tests.support.procs import Procs
from tests.support.wait import eventually

CONFIG = """
tiers:
  p2: {concurrency: 1, max_wait_ms: 600000}
default_tier: p2
defaults:
  shards: 1
  max_deliveries: 5
  visibility_timeout_ms: 1000
  block_ms: 100
  grace_period_s: 5
  retry: {base_ms: 20, max_ms: 200}
agents:
  crashgraph: {class: "tests.langgraph.graph_agents:CrashGraphAgent"}
  approvalgraph: {class: "tests.langgraph.graph_agents:ApprovalGraphAgent"}
  research_graph: {class: "agents.research_graph:ResearchGraphAgent"}
"""


@pytest.fixture
def lg_dir(tmp_path: Path) -> Path:
    path = tmp_path / "effects"
    path.mkdir()
    return path


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "graphs.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
def procs(redis_url: str, prefix: str, config_path: Path, lg_dir: Path) -> Iterator[Procs]:
    p = worker_procs(redis_url, prefix, config_path, LG_DIR=str(lg_dir))
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
async def orch(client: Redis, prefix: str, config_path: Path) -> AsyncIterator[Orchestrator]:
    settings = Settings(prefix=prefix, outbox=True)
    async with Orchestrator.from_client(
        client, config=load_config(config_path), settings=settings
    ) as made:
        yield made


def _lines(lg_dir: Path, name: str) -> list[str]:
    path = lg_dir / name
    return path.read_text().splitlines() if path.exists() else []


async def test_a_killed_graph_resumes_at_node_2(
    orch: Orchestrator, procs: Procs, client: Redis, prefix: str, lg_dir: Path
) -> None:
    first = procs.worker("tests.langgraph.graph_agents:CrashGraphAgent")
    await registered(client, prefix, "crashgraph", 1)
    handle = await orch.submit({"intent": "crashgraph", "payload": {"topic": "tides"}})

    async def hung() -> bool:
        return (lg_dir / "hung").exists()

    await eventually(hung, timeout=60, what="node 2 hanging")
    assert (lg_dir / "hung").read_text() == str(first.pid)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=10)

    second = procs.worker("tests.langgraph.graph_agents:CrashGraphAgent")
    result = await handle.result(timeout=90)
    assert result.status == ResultStatus.SUCCESS, result.error
    output: dict[str, Any] = result.output
    assert output["done"] is True
    assert output["recorded"] == str({"recorded": "draft of tides"})

    assert _lines(lg_dir, "node1") == [f"tides {first.pid}"]  # not run again
    assert _lines(lg_dir, "tool") == [f"draft of tides {first.pid}"]  # replayed, not called
    assert _lines(lg_dir, "node2") == [f"tides {first.pid}", f"tides {second.pid}"]
    assert _lines(lg_dir, "node3") == [f"tides {second.pid}"]


async def test_a_paused_graph_worker_checkpoints_nothing_once_reclaimed(
    orch: Orchestrator,
    procs: Procs,
    client: Redis,
    prefix: str,
    lg_dir: Path,
    tmp_path: Path,
    config_path: Path,
) -> None:
    # It beats rarely: woken, its heartbeat would otherwise learn of the reclaim first and
    # cancel the run before the fence is reached.
    rare = tmp_path / "rare.yaml"
    rare.write_text(
        CONFIG.replace('CrashGraphAgent"}', 'CrashGraphAgent", settings: {heartbeat_ms: 600000}}')
    )
    assert "heartbeat_ms" in rare.read_text()
    env = {"DEEPAGENTS_CONFIG": str(rare), "LG_PAUSE_S": "3"}
    paused = procs.worker("tests.langgraph.graph_agents:CrashGraphAgent", env=env)
    await registered(client, prefix, "crashgraph", 1)
    handle = await orch.submit({"intent": "crashgraph", "payload": {"topic": "reefs"}})

    async def hung() -> bool:
        return (lg_dir / "hung").exists()

    await eventually(hung, timeout=60, what="node 2 sleeping")
    paused.send_signal(signal.SIGSTOP)
    peer = procs.worker("tests.langgraph.graph_agents:CrashGraphAgent")
    result = await handle.result(timeout=90)
    assert result.status == ResultStatus.SUCCESS, result.error
    paused.send_signal(signal.SIGCONT)

    async def refused() -> bool:
        return "step_refused" in procs.log(paused)

    await eventually(refused, timeout=60, what="the paused worker's write refused")
    assert _lines(lg_dir, "node1") == [f"reefs {paused.pid}"]
    assert _lines(lg_dir, "tool") == [f"draft of reefs {paused.pid}"]
    assert _lines(lg_dir, "node2") == [f"reefs {paused.pid}", f"reefs {peer.pid}"]
    assert _lines(lg_dir, "node3") == [f"reefs {peer.pid}"]  # the paused one went no further


async def test_interrupts_park_the_task_and_replies_resume_it(
    orch: Orchestrator, procs: Procs, client: Redis, prefix: str, lg_dir: Path
) -> None:
    procs.worker("tests.langgraph.graph_agents:ApprovalGraphAgent")
    await registered(client, prefix, "approvalgraph", 1)
    handle = await orch.submit({"intent": "approvalgraph", "payload": {"draft": "d1", "asks": 2}})

    async def asked(number: int) -> dict[str, Any] | None:
        info = await orch.lookup(handle.task_id)
        if info is None or info.get("state") != "waiting":
            return None
        return info if f'"question":{number}' in info.get("question", "") else None

    info = await eventually(lambda: asked(1), timeout=60, what="the first question")
    assert info is not None and '"draft":"d1"' in info["question"]

    # The tier has one slot: a task that runs to its end meanwhile shows the waiting one
    # holds none.
    other = await orch.submit({"intent": "approvalgraph", "payload": {"draft": "d2", "asks": 0}})
    done = await other.result(timeout=60)
    assert done.status == ResultStatus.SUCCESS, done.error
    info = await orch.lookup(handle.task_id)
    assert info is not None and info["state"] == "waiting"

    await orch.reply(handle.task_id, {"answer": "yes"})
    await eventually(lambda: asked(2), timeout=60, what="the second question")
    await orch.reply(handle.task_id, {"answer": {"edit": "shorter"}})
    result = await handle.result(timeout=60)
    assert result.status == ResultStatus.SUCCESS, result.error
    assert result.output["answers"] == ["yes", {"edit": "shorter"}]
    assert _lines(lg_dir, "draft") == ["d1", "d2"]  # the first node ran once per task


async def test_the_research_graph_example_publishes_an_approved_answer(
    orch: Orchestrator, procs: Procs, client: Redis, prefix: str
) -> None:
    procs.worker("agents.research_graph:ResearchGraphAgent")
    await registered(client, prefix, "research_graph", 1)
    question = "Why do tides follow the moon?"
    handle = await orch.submit({"intent": "research_graph", "payload": {"question": question}})

    async def waiting() -> dict[str, Any] | None:
        info = await orch.lookup(handle.task_id)
        return info if info is not None and info.get("state") == "waiting" else None

    info = await eventually(waiting, timeout=60, what="the approval question")
    assert info is not None and "Moon orbits Earth" in info["question"]
    await orch.reply(handle.task_id, {"answer": "approve"})
    result = await handle.result(timeout=60)
    assert result.status == ResultStatus.SUCCESS, result.error
    assert result.output["verdict"] == "approved"
    assert result.output["terms"] == ["moon", "tides"]
    assert "Bay of Fundy" not in result.output["answer"]
    assert result.output["answer"].startswith("Tides rise and fall")


async def test_a_node_that_interrupts_twice_gets_both_replies(
    orch: Orchestrator, procs: Procs, client: Redis, prefix: str
) -> None:
    procs.worker("tests.langgraph.graph_agents:ApprovalGraphAgent")
    await registered(client, prefix, "approvalgraph", 1)
    payload = {"draft": "d3", "asks": 1, "double": True}
    handle = await orch.submit({"intent": "approvalgraph", "payload": payload})

    async def asked(marker: str) -> dict[str, Any] | None:
        info = await orch.lookup(handle.task_id)
        if info is None or info.get("state") != "waiting":
            return None
        return info if marker in info.get("question", "") else None

    await eventually(lambda: asked('"question":1'), timeout=60, what="the first question")
    await orch.reply(handle.task_id, {"answer": "first"})
    await eventually(lambda: asked('"question":"again"'), timeout=60, what="the second")
    await orch.reply(handle.task_id, {"answer": "second"})
    result = await handle.result(timeout=60)
    assert result.status == ResultStatus.SUCCESS, result.error
    assert result.output["answers"] == ["first", "second"]
