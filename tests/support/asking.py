"""Agents that ask a person a question (``ctx.ask``), for the human-in-the-loop tests. Each
run of ``execute`` appends a line to the file named in the payload (``runs``), and so does
each step's side effect, so a test sees how many times the agent ran, which steps ran, and
with which answer."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from deepagents import AgentContract, Result
from deepagents.contract.context import TaskContext

CONFIG = """
tiers:
  p0: {concurrency: 5, max_wait_ms: 60000}
  p2: {concurrency: 100, max_wait_ms: 600000}
default_tier: p2
defaults: {shards: 2, visibility_timeout_ms: 5000, block_ms: 100,
           retry: {base_ms: 50, max_ms: 200, jitter: false}}
agents:
  approver: {class: "tests.support.asking:ApprovalAgent"}
  echo: {class: "agents.echo:EchoAgent"}
  escalations: {class: "tests.support.asking:EscalationAgent"}
  mixed: {class: "tests.support.asking:MixedAgent"}
  patterned: {class: "tests.support.asking:PatternAgent"}
asks: {escalation_intent: escalation}
"""


class Decision(BaseModel):
    approved: bool
    note: str = Field(default="", max_length=200)


class ApprovalAgent(AgentContract):
    """Asks for approval of ``payload.item``; answers with the decision. With
    ``payload.actions`` it proposes a decision and asks which of those actions the person
    takes (``ctx.ask(..., actions=...)``), and answers with what they did."""

    name = "approver"
    version = "1.0.0"
    intents = ("approve",)

    async def execute(self, context: dict[str, Any]) -> Result:
        payload = context["payload"]
        runs = Path(payload["runs"]) if payload.get("runs") else None
        ctx: TaskContext = context["ctx"]
        task_id = context["task"].task_id
        _note(runs, f"{task_id} start")
        await ctx.step("prepare", _note, runs, f"{task_id} prepared")
        if payload.get("actions"):  # the Agent Inbox way: act on a proposed decision
            acted = await ctx.ask(
                f"approve {payload.get('item', 'it')}?",
                schema=Decision,
                timeout_s=float(payload.get("timeout_s", 600)),
                actions=payload["actions"],
                proposal=Decision(approved=True, note=payload.get("proposal", "as drafted")),
            )
            value = acted.value.model_dump() if acted.value is not None else None
            return Result(
                output={"action": acted.action.value, "value": value, "response": acted.response}
            )
        decision = await ctx.ask(
            f"approve {payload.get('item', 'it')}?",
            schema=Decision,
            timeout_s=float(payload.get("timeout_s", 600)),
            on_timeout=payload.get("on_timeout", "fail"),
            default=Decision(approved=False, note="default") if payload.get("default") else None,
        )
        await ctx.step("finalize", _note, runs, f"{task_id} answered {decision.approved}")
        return Result(output={"approved": decision.approved, "note": decision.note})


def _note(runs: Path | None, line: str) -> None:
    if runs is not None:
        with runs.open("a") as out:
            out.write(line + "\n")


class EscalationAgent(AgentContract):
    """Where unanswered questions go (``asks.escalation_intent``); no worker runs it in the
    tests, which answer the escalated task themselves."""

    name = "escalations"
    version = "1.0.0"
    intents = ("escalation",)

    async def execute(self, context: dict[str, Any]) -> Result:
        return Result(output=context["payload"])


class MixedAgent(AgentContract):
    """``payload.ask``: asks a question and waits (an hour); else sleeps ``sleep_ms`` and
    answers: waiting tasks and working tasks on one agent, sharing its tiers' slots."""

    name = "mixed"
    version = "1.0.0"
    intents = ("mixed",)

    async def execute(self, context: dict[str, Any]) -> Result:
        payload = context["payload"]
        if payload.get("ask"):
            ctx: TaskContext = context["ctx"]
            decision = await ctx.ask("go?", schema=Decision, timeout_s=3600)
            return Result(output={"approved": decision.approved})
        await asyncio.sleep(float(payload.get("sleep_ms", 0)) / 1000)
        return Result(output={"n": payload.get("n")})


class Note(BaseModel):
    """An answer schema whose pattern backtracks exponentially under Python's ``re``
    (issue 39): ``"a" * 26 + "!"`` took 4.8 s of the gateway's event loop."""

    note: str = Field(pattern=r"^(\w+\s?)*$")


class Repeated(BaseModel):
    """A pattern with a backreference, which no linear-time engine matches: refused at ask."""

    model_config = ConfigDict(regex_engine="python-re")
    word: str = Field(pattern=r"^(\w+) \1$")


class PatternAgent(AgentContract):
    """Asks for a ``Note`` (intent ``note``) or a ``Repeated`` (intent ``repeated``)."""

    name = "patterned"
    version = "1.0.0"
    intents = ("note", "repeated")

    async def execute(self, context: dict[str, Any]) -> Result:
        ctx: TaskContext = context["ctx"]
        model: type[BaseModel] = Note if context["task"].intent == "note" else Repeated
        answer = await ctx.ask("say it", schema=model, timeout_s=600)
        return Result(output=answer.model_dump())
