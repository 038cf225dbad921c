"""The demo's LangGraph part: research graphs (agents/research_graph.py: plan, a search
tool, a draft, an approval through ``interrupt()``), run durably by a worker beside the
other agents and approved by the demo's automatic approver through the reply API.

Only with the extra ``deepagents[langgraph]``: without it the demo runs without them.
"""

from __future__ import annotations

import asyncio
import importlib.util
import statistics
import time
from dataclasses import dataclass, field

from deepagents.contract.result import Result, ResultStatus
from deepagents.errors import DeepAgentsError
from deepagents.orchestrator import Orchestrator

AGENT = "research_graph"
AGENT_CLASS = "agents.research_graph:ResearchGraphAgent"
APPROVAL = {"answer": "approve"}
QUESTIONS = (
    "Why do tides follow the moon?",
    "How does the sun change the tides?",
    "Where are the ocean's largest tides?",
)


def available() -> bool:
    """Whether the extra ``deepagents[langgraph]`` is installed (no import of it here)."""
    return all(importlib.util.find_spec(m) is not None for m in ("langgraph", "langchain"))


@dataclass
class GraphRuns:
    results: list[Result] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    refused: int = 0


async def run_graphs(orch: Orchestrator, count: int) -> GraphRuns:
    """Submit ``count`` research graphs and wait for their results (approval included)."""
    runs = GraphRuns()

    async def one(n: int) -> None:
        started = time.monotonic()
        payload = {"question": QUESTIONS[n % len(QUESTIONS)]}
        try:
            handle = await orch.submit({"intent": AGENT, "payload": payload})
        except DeepAgentsError:
            runs.refused += 1
            return
        runs.results.append(await handle.result(timeout=300))
        runs.seconds.append(time.monotonic() - started)

    await asyncio.gather(*(one(n) for n in range(count)))
    return runs


def graph_line(runs: GraphRuns, answered: int) -> str:
    done = [r for r in runs.results if r.status is ResultStatus.SUCCESS]
    published = sum(1 for r in done if r.output.get("verdict") == "approved")
    median = statistics.median(runs.seconds) if runs.seconds else float("nan")
    noun = "LangGraph research graph" + ("" if len(runs.results) == 1 else "s")
    return (
        f"{len(runs.results)} {noun} (plan, search tool, draft, approval by interrupt()): "
        f"{answered} approved by the demo's automatic approver; {published} published, "
        f"{len(runs.results) - len(done)} failed, {runs.refused} refused; median "
        f"{median:.1f} s from submit to result, approval included"
    )
