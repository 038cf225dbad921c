"""The research pipeline example (agents/research_pipeline.py) under test: its config over a
model simulator, a subclass that journals every model call it makes, and readers of what a
run left behind (the journal, the step records, the step audit events)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from redis.asyncio import Redis

from agents.research_pipeline import ResearchPipelineAgent
from deepagents import current_context
from deepagents.contract.task import Task
from tests.support.replies import as_bytes, entries

AGENT = "tests.support.pipeline:JournaledPipeline"
SHARDS = 2
JOURNAL_ENV = "PIPELINE_JOURNAL"

# Long model timeouts: a test holds the simulator's answers to kill a worker mid-call, and
# the call must still be in flight (not timed out and answered by the fallback) then.
CONFIG = """
tiers:
  p2: {{concurrency: 10, max_wait_ms: 600000}}
default_tier: p2
defaults:
  shards: {shards}
  max_deliveries: 10
  visibility_timeout_ms: 1000
  block_ms: 100
  grace_period_s: 5
  retry: {{base_ms: 20, max_ms: 200}}
agents:
  research_pipeline: {{class: "{agent}"}}
models:
  research:
    base_url: "{url}"
    max_tokens: 256
    price_in_per_1k: 0.0005
    price_out_per_1k: 0.0015
    timeouts: {{total_s: 600, first_token_s: 600, attempt_s: 600}}
"""

SOURCES = [
    {
        "title": "Basis trading in index futures",
        "text": "The basis between index futures and the cash index widens when funding "
        "rates rise; arbitrage desks hedge the basis with short futures.",
    },
    {
        "title": "Margin calls in volatile markets",
        "text": "Exchanges raise initial margin when volatility jumps, and margin calls force "
        "leveraged holders to cut positions, which deepens the move.",
    },
    {
        "title": "Copper and the rates curve",
        "text": "Copper futures track the growth outlook; a flattening rates curve often "
        "precedes weaker copper demand and lower futures prices.",
    },
]


def write_config(tmp_path: Path, url: str, agent: str = AGENT) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(CONFIG.format(shards=SHARDS, agent=agent, url=url))
    return path


def request(**overrides: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {"topic": "futures market stress", "sources": SOURCES, "lanes": 3}
    return {"intent": "research_pipeline", "payload": {**payload, **overrides}}


class JournaledPipeline(ResearchPipelineAgent):
    """Appends ``<step_key> <pid> <tokens>`` to the file ``$PIPELINE_JOURNAL`` after each
    model call returns: one line per call that ran to its end, in one O_APPEND write."""

    async def call_model(self, task: Task, messages: list[dict[str, str]]) -> dict[str, Any]:
        answer = await super().call_model(task, messages)
        line = f"{current_context().step_key} {os.getpid()} {answer['tokens']}\n"
        fd = os.open(os.environ[JOURNAL_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        return answer


@dataclass(frozen=True, slots=True)
class Call:
    task_id: str
    step: str
    pid: int
    tokens: int


def journal(path: Path) -> list[Call]:
    if not path.exists():
        return []
    calls = []
    for line in path.read_text().splitlines():
        key, pid, tokens = line.split(" ")
        task_id, step = key.split("/", 1)
        calls.append(Call(task_id, step, int(pid), int(tokens)))
    return calls


def model_steps(lanes: int, revisions: int = 0) -> set[str]:
    """The step ids of the model calls one run makes, approved after ``revisions``."""
    lane_steps = {f"g0.{i}#{name}" for i in range(lanes) for name in ("analyse", "condense")}
    revised = {"revise" if n == 1 else f"revise#{n}" for n in range(1, revisions + 1)}
    return {"plan", "draft", "summary", *lane_steps, *revised}


async def recorded_steps(client: Redis, prefix: str, shard: int, task_id: str) -> set[str]:
    fields = await client.hkeys(f"{prefix}:{{research_pipeline:{shard}}}:s:{task_id}")
    names = (as_bytes(f).decode() for f in fields)
    return {n[5:] for n in names if n.startswith("step:")}


async def outbox_events(client: Redis, prefix: str, task_id: str) -> list[dict[str, Any]]:
    """The task's audit events still in the outbox streams, in stream order per shard."""
    out = []
    for shard in range(SHARDS):
        stream = f"{prefix}:{{research_pipeline:{shard}}}:audit"
        for _, fields in await entries(client, stream):
            out += [e for e in orjson.loads(fields[b"events"]) if e.get("task_id") == task_id]
    return out
