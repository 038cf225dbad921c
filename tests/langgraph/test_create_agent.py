"""LangChain's ``create_agent`` graph under ``DeepAgentsMiddleware``, on a real worker
process and the model simulator: its model calls are deepagents' (served by the simulator,
not by the graph's own model), its tool calls go through ``wrap_tool_call``, and a worker
killed with ``kill -9`` inside the tool node, after one of the node's tool calls completed,
leaves a task that resumes there without calling that tool again."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from deepagents.config import Settings, load_config
from deepagents.contract import ResultStatus
from deepagents.modelcall.simulator import SimSettings, SimulatorThread
from deepagents.orchestrator import Orchestrator
from tests.e2e.conftest import registered, worker_procs
from tests.support.replies import as_bytes
from tests.support.wait import eventually

AGENT = "tests.langgraph.graph_agents:ReactGraphAgent"
CONFIG = """
tiers:
  p2: {{concurrency: 1, max_wait_ms: 600000}}
default_tier: p2
defaults:
  shards: 1
  max_deliveries: 5
  visibility_timeout_ms: 1000
  block_ms: 100
  grace_period_s: 5
  retry: {{base_ms: 20, max_ms: 200}}
agents:
  reactgraph: {{class: "{agent}"}}
models:
  sim: {{base_url: "{url}", max_tokens: 64}}
"""
PROMPT = 'Note the tide.\nsim: call note_fact {"fact": "tides"}\nsim: call wait_once\n'


@pytest.fixture
def sim() -> Iterator[SimulatorThread]:
    with SimulatorThread(SimSettings(latency_s=0.01, completion_tokens=10, seed=3)) as thread:
        yield thread


async def test_a_killed_create_agent_graph_does_not_call_a_completed_tool_again(
    redis_url: str, client: Redis, prefix: str, tmp_path: Path, sim: SimulatorThread
) -> None:
    lg_dir = tmp_path / "effects"
    lg_dir.mkdir()
    path = tmp_path / "react.yaml"
    path.write_text(CONFIG.format(agent=AGENT, url=sim.url))
    procs = worker_procs(redis_url, prefix, path, LG_DIR=str(lg_dir))
    try:
        first = procs.worker(AGENT)
        await registered(client, prefix, "reactgraph", 1)
        settings = Settings(prefix=prefix, outbox=True)
        async with Orchestrator.from_client(
            client, config=load_config(path), settings=settings
        ) as orch:
            handle = await orch.submit({"intent": "reactgraph", "payload": {"prompt": PROMPT}})
            steps = f"{prefix}:{{reactgraph:0}}:s:{handle.task_id}"

            async def note_recorded() -> bool:  # wait_once hangs; note_fact's step landed
                names = [as_bytes(f).decode() for f in await client.hkeys(steps)]
                noted = any(n.startswith("step:tool:langchain/note_fact") for n in names)
                return noted and (lg_dir / "hung").exists()

            await eventually(note_recorded, timeout=60, what="note_fact recorded, wait_once hung")
            os.kill(first.pid, signal.SIGKILL)
            first.wait(timeout=10)
            second = procs.worker(AGENT)
            result = await handle.result(timeout=90)
    finally:
        procs.close()
    assert result.status is ResultStatus.SUCCESS, result.error
    messages = result.output["messages"]
    tools = {m["name"]: m["content"] for m in messages if m["role"] == "tool"}
    assert tools == {"note_fact": "noted tides", "wait_once": "waited"}
    # the final answer is the simulator's (it echoes the tool results), not the graph's model
    assert "note_fact=noted tides" in messages[-1]["content"]
    assert (lg_dir / "tool").read_text().splitlines() == [f"tides {first.pid}"]  # once
    assert (lg_dir / "hung").read_text() == str(first.pid)
    assert second.pid != first.pid
    # two model turns; the first one's reply was recorded, not asked for again
    assert sum(1 for entry in sim.log() if entry.status == 200) == 2
