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
    """Answers every open question of the agents in ``answers`` (agent -> its reply), until
    stopped: the pipeline's approvals and, with the extra, the research graph's."""

    orch: Orchestrator
    answers: dict[str, dict[str, Any]] = field(default_factory=lambda: {AGENT: APPROVAL})
    approved: list[str] = field(default_factory=list)
    by_agent: dict[str, int] = field(default_factory=dict)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        while not self._stop.is_set():
            for agent, answer in self.answers.items():
                for waiting in await self.orch.waiting(agent):
                    await self._approve(agent, waiting.task_id, answer)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), POLL_S)

    async def _approve(self, agent: str, task_id: str, answer: dict[str, Any]) -> None:
        try:
            await self.orch.reply(task_id, answer)
        except (AlreadyReplied, NotWaiting):  # someone (or the wait's timeout) came first
            return
        self.by_agent[agent] = self.by_agent.get(agent, 0) + 1
        if agent == AGENT:
            self.approved.append(task_id)

    def stop(self) -> None:
        self._stop.set()


@contextlib.asynccontextmanager
async def approving(
    orch: Orchestrator, extra: dict[str, dict[str, Any]] | None = None
) -> AsyncIterator[Approver]:
    """The approver of the pipelines, and of ``extra``'s agents with their replies."""
    approver = Approver(orch, {AGENT: APPROVAL, **(extra or {})})
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
