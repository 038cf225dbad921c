"""The demo's long-running part: research pipelines (agents/research_pipeline.py) that stop
to ask for an approval, and the automatic approver that answers them so the demo runs
unattended.

The approver is what a person at ``deepagents tasks waiting`` / ``deepagents reply`` would
do, through the same path (``Orchestrator.waiting`` and ``Orchestrator.reply``): it lists the
open questions and approves each one.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from deepagents.contract.result import Result, ResultStatus
from deepagents.errors import AlreadyReplied, DeepAgentsError, NotWaiting
from deepagents.orchestrator import Orchestrator

AGENT = "research_pipeline"
AGENT_CLASS = "agents.research_pipeline:ResearchPipelineAgent"
APPROVAL = {"approved": True, "reviewer": "deepagents demo (automatic approver)"}
POLL_S = 0.2
TOPICS = ("margin stress in index futures", "copper and the rates curve", "basis after a hike")
_WORDS = ("margin", "futures", "volatility", "hedge", "basis", "rates", "curve", "copper")


def pipeline_task(rng: random.Random, n: int) -> dict[str, Any]:
    """A pipeline task over a few generated desk notes, approved within five minutes."""
    sources = [
        {"title": f"desk note {i + 1}", "text": " ".join(rng.choice(_WORDS) for _ in range(60))}
        for i in range(3)
    ]
    payload = {
        "topic": TOPICS[n % len(TOPICS)],
        "sources": sources,
        "lanes": 4,
        "approval_timeout_s": 300,
    }
    return {"intent": AGENT, "payload": payload}


@dataclass
class Approver:
    """Approves every open question of the pipeline agent, until stopped."""

    orch: Orchestrator
    approved: list[str] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        while not self._stop.is_set():
            for waiting in await self.orch.waiting(AGENT):
                await self._approve(waiting.task_id)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), POLL_S)

    async def _approve(self, task_id: str) -> None:
        try:
            await self.orch.reply(task_id, APPROVAL)
        except (AlreadyReplied, NotWaiting):  # someone (or the wait's timeout) came first
            return
        self.approved.append(task_id)

    def stop(self) -> None:
        self._stop.set()


@contextlib.asynccontextmanager
async def approving(orch: Orchestrator) -> AsyncIterator[Approver]:
    approver = Approver(orch)
    task = asyncio.create_task(approver.run())
    try:
        yield approver
    finally:
        approver.stop()
        await task


@dataclass
class PipelineRuns:
    results: list[Result] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    task_ids: list[str] = field(default_factory=list)
    refused: int = 0


async def run_pipelines(orch: Orchestrator, count: int, seed: int) -> PipelineRuns:
    """Submit ``count`` pipelines and wait for their results (their approval included)."""
    rng, runs = random.Random(seed), PipelineRuns()

    async def one(n: int) -> None:
        started = time.monotonic()
        try:
            handle = await orch.submit(pipeline_task(rng, n))
        except DeepAgentsError:
            runs.refused += 1
            return
        runs.task_ids.append(handle.task_id)
        runs.results.append(await handle.result(timeout=300))
        runs.seconds.append(time.monotonic() - started)

    await asyncio.gather(*(one(n) for n in range(count)))
    return runs


def pipeline_line(runs: PipelineRuns, answered: int) -> str:
    done = [r for r in runs.results if r.status is ResultStatus.SUCCESS]
    approved = sum(1 for r in done if r.output.get("approved"))
    degraded = sum(1 for r in done if r.degraded)  # a model step answered offline
    calls = sum(int(r.output.get("model_calls", 0)) for r in done)
    cost = sum(r.metrics.cost_usd for r in done)
    median = statistics.median(runs.seconds) if runs.seconds else float("nan")
    return (
        f"{_n(len(runs.results), 'research pipeline')} (3 phases, 4 parallel lanes each): "
        f"{_n(answered, 'question')} answered by the demo's automatic approver; {approved} "
        f"approved and finished, {len(runs.results) - len(done)} failed, {runs.refused} "
        f"refused, {degraded} degraded; {_n(calls, 'model call')}, ${cost:.6f}; median "
        f"{median:.1f} s from submit to result, approval included"
    )


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")
