"""Crash durability of tool calls against real worker processes killed with ``kill -9``.

A worker runs ``ToolsAgent`` (tests/tools/agents.py): three Python tool calls complete,
the fourth is in flight (its effect written, waiting for a gate) when the worker is killed.
On redelivery to a new worker, the three completed calls are not run again (their recorded
results are returned), the in-flight call runs again with the same idempotency key (the
step key), and the calls after it run once: the MCP server's tool (configured in the YAML,
a real stdio server started by the worker) and a last Python call."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from deepagents.config import Settings, load_config
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from tests.e2e.conftest import worker_procs
from tests.support.procs import REPO, Procs
from tests.support.replies import entries
from tests.support.wait import eventually

AGENT = "tests.tools.agents:ToolsAgent"
CALLS = 3

CONFIG = f"""
tiers:
  p2: {{concurrency: 4, max_wait_ms: 600000}}
default_tier: p2
defaults:
  shards: 1
  max_deliveries: 5
  visibility_timeout_ms: 1000
  block_ms: 200
  grace_period_s: 5
  retry: {{base_ms: 20, max_ms: 200}}
agents:
  toolsagent:
    class: "{AGENT}"
    mcp_servers:
      local:
        command: "{sys.executable}"
        args: ["-m", "tests.tools.mcp_server", "stdio"]
        cwd: "{REPO}"
        env_from_env: {{MCP_SIDE_EFFECTS: MCP_SIDE_EFFECTS}}
"""


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "tools.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
def tool_procs(
    redis_url: str, prefix: str, config_path: Path, client: Redis, tmp_path: Path
) -> Iterator[Procs]:
    effects, spans = tmp_path / "effects.log", tmp_path / "spans.jsonl"
    p = worker_procs(
        redis_url,
        prefix,
        config_path,
        MCP_SIDE_EFFECTS=str(effects),
        DEEPAGENTS_TRACE_FILE=str(spans),
    )
    try:
        yield p
    finally:
        p.close()


def _lines(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]
    return [line.split(" ") for line in lines]


async def test_completed_tool_calls_never_run_again_after_kill_9(
    client: Redis, prefix: str, config_path: Path, tool_procs: Procs, tmp_path: Path
) -> None:
    effects, gate = tmp_path / "effects.log", tmp_path / "gate"
    victim = tool_procs.worker(AGENT)
    config = load_config(config_path)
    async with Orchestrator.from_client(
        client, config=config, settings=Settings(prefix=prefix)
    ) as orch:
        payload = {"effects": str(effects), "gate": str(gate), "calls": CALLS}
        handle = await orch.submit(Task(intent="use_tools", payload=payload))

        async def in_flight() -> bool:
            return any(line[0] == str(CALLS + 1) for line in _lines(effects))

        await eventually(in_flight, timeout=60, what="the in-flight tool call's effect")
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        gate.touch()
        survivor = tool_procs.worker(AGENT)
        result = await handle.result(timeout=90)
    assert result.status is ResultStatus.SUCCESS, (result.error, tool_procs.output(survivor))
    assert result.output is not None and result.output["pid"] == survivor.pid
    task_id = handle.task_id

    python = [line for line in _lines(effects) if line[0].isdigit() and len(line) == 3]
    runs = [(int(n), int(pid), key) for n, pid, key in python]
    step = f"{task_id}/tool:python/effect"
    in_flight_key = f"{task_id}/tool:python/effect_then_wait"
    assert runs == [
        (1, victim.pid, step),
        (2, victim.pid, f"{step}#2"),
        (3, victim.pid, f"{step}#3"),
        (4, victim.pid, in_flight_key),  # in flight at the kill:
        (4, survivor.pid, in_flight_key),  # runs again, with the same idempotency key
        (5, survivor.pid, f"{step}#4"),
    ]
    # The MCP server's tool ran once, on the survivor's pooled session, with its step key.
    mcp = [line for line in _lines(effects) if len(line) == 4 and line[1] == "record"]
    assert [line[2:] for line in mcp] == [["from-agent", f"{task_id}/tool:local/record"]]
    # The replayed calls returned what the victim's calls had recorded.
    results = result.output["results"]
    assert [r["n"] for r in results[:CALLS]] == [1, 2, 3]
    assert {r["pid"] for r in results[:CALLS]} == {victim.pid}
    assert results[CALLS] == {"n": 4, "pid": survivor.pid}
    assert results[CALLS + 1] == {"result": "recorded from-agent"}

    # The survivor's tool_call audit events: the calls it ran, hashes and no values.
    events = []
    for _, fields in await entries(client, f"{prefix}:{{toolsagent:0}}:audit"):
        events += [e for e in _decode(fields) if e["type"] == "tool_call"]
    assert [(e["tool"], e["server"], e["outcome"]) for e in events] == [
        ("effect_then_wait", "python", "ok"),
        ("record", "local", "ok"),
        ("effect", "python", "ok"),
    ]
    assert all(len(e["arguments_sha256"]) == 64 for e in events)
    assert str(effects) not in str(events)

    # Steps get spans, replayed or run; a tool call's span hangs below its step's.
    traced = [orjson.loads(line) for line in (tmp_path / "spans.jsonl").read_text().splitlines()]
    mine = [s for s in traced if s["pid"] == survivor.pid]
    steps = {
        s["attributes"]["deepagents.step.id"]: s for s in mine if s["name"].startswith("step ")
    }
    assert steps["tool:python/effect"]["attributes"]["deepagents.step.replayed"] is True
    ran = steps["tool:python/effect_then_wait"]
    assert ran["attributes"]["deepagents.step.replayed"] is False
    call = next(s for s in mine if s["name"] == "execute_tool effect_then_wait")
    assert call["parent_id"] == ran["span_id"]
    assert call["attributes"]["deepagents.tool.outcome"] == "ok"


def _decode(fields: dict[bytes, bytes]) -> list[dict[str, Any]]:
    decoded: list[dict[str, Any]] = orjson.loads(fields[b"events"])
    return decoded
