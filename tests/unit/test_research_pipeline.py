"""The research pipeline example in-process (``AgentHarness``: the real worker over the
MemoryBus), as an agent author unit-tests a long-running agent: no model configured, so
each model step answers its offline placeholder, marked degraded. And its pure parts: the
plan read back from the planner, the retrieval, the state migration hook."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from agents import pipeline_text as pt
from agents.research_pipeline import PipelineState, ResearchPipelineAgent
from deepagents import Task
from deepagents.errors import StateIncompatible
from deepagents.testing import AgentHarness
from deepagents.worker.step_state import restore_state
from tests.support.pipeline import SOURCES
from tests.support.wait import eventually


def _task(**payload: Any) -> Task:
    base: dict[str, Any] = {"topic": "futures market stress", "sources": SOURCES, "lanes": 2}
    return Task(intent="research_pipeline", payload={**base, **payload})


async def test_it_asks_for_approval_and_finishes_once_approved() -> None:
    async with AgentHarness(ResearchPipelineAgent) as h:
        handle = await h.submit(_task())

        async def asked() -> bool:
            return bool(await h.waiting())

        await eventually(asked, timeout=10, what="the approval question")
        await h.reply(handle.task_id, {"approved": True, "reviewer": "unit"})
        result = await handle.result(timeout=10)
    out = result.output
    assert out["approved"] and out["summary"].startswith("(offline)") and result.degraded
    assert out["model_calls"] == 1 + 2 * 2 + 1 + 1  # plan, 2 lanes of 2, draft, summary
    assert [r["reviewer"] for r in out["reviews"]] == ["unit"]


async def test_an_unanswered_approval_with_the_default_policy_is_a_rejection() -> None:
    async with AgentHarness(ResearchPipelineAgent) as h:
        task = _task(approval_timeout_s=0.2, on_timeout="default")
        result = await h.run(task)
    assert not result.output["approved"] and result.output["summary"] is None
    assert result.output["reviews"][0]["reviewer"].startswith("nobody")


def test_the_plan_takes_the_planners_numbered_lines_then_the_default_aspects() -> None:
    answer = "Here is the plan:\n1. How wide is the basis today?\n2) Who holds the margin risk?"
    questions = pt.plan_questions("basis", answer, 4, ["Given first?"])
    listed = ["How wide is the basis today?", "Who holds the margin risk?"]
    assert questions[:3] == ["Given first?", *listed]
    assert questions[3] == f"basis: {pt.ASPECTS[0]}"


def test_search_ranks_the_sources_sharing_most_keywords() -> None:
    index = pt.index_sources(SOURCES)
    hits = pt.search("margin calls when volatility jumps", index, SOURCES)
    assert hits[0]["title"] == "Margin calls in volatile markets"
    assert pt.search("zzz", index, SOURCES) == []


def test_a_checkpoint_of_another_major_version_is_state_incompatible() -> None:
    agent = ResearchPipelineAgent()
    body = orjson.dumps({"phase": "review", "plan": ["q"], "drafts": 1})
    restored = restore_state(agent, body, "1.4.2")  # another 1.x: read as it is
    assert isinstance(restored, PipelineState) and restored.plan == ["q"]
    with pytest.raises(StateIncompatible, match=r"no migration from version 0\.9\.0"):
        restore_state(agent, body, "0.9.0")
