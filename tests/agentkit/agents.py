"""Agents the toolkit's end-to-end tests run in real worker processes."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from deepagents import AgentContract, Result
from deepagents.agentkit import run_tools
from deepagents.contract.toolcalls import ToolCall
from deepagents.tools import tool

FILLER = "the quarterly figures moved a little and the team wrote it all down again. "


class ChatAgent(AgentContract):
    """A long conversation: ``turns`` user messages, each answered by the model (no tools),
    the history carried from one turn to the next. Its YAML entry gives it a context budget."""

    name = "chat_budget"
    version = "1"
    intents = ("chat_budget",)

    async def execute(self, context: dict[str, Any]) -> Result:
        payload, task = context["payload"], context["task"]
        messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
        summaries = 0
        for turn in range(int(payload["turns"])):
            text = f"turn {turn}: " + FILLER * int(payload.get("repeat", 5))
            messages.append({"role": "user", "content": text})
            result = await run_tools(model="chat", messages=messages, max_turns=1, task=task)
            messages = result.messages
            summaries += any("Summary of the earlier" in str(m["content"]) for m in messages[:3])
        return Result(
            output={"turns": payload["turns"], "kept": len(messages), "summaries": summaries}
        )


class PlainChatAgent(ChatAgent):
    """The same conversation, with no middleware."""

    name = "chat_plain"
    intents = ("chat_plain",)


# Tools whose every run is journaled (one line per run, one O_APPEND write) in the file
# named by $TOOLKIT_JOURNAL, so a test counts what ran, across worker processes.
JOURNAL_ENV = "TOOLKIT_JOURNAL"


def journal(line: str) -> None:
    fd = os.open(os.environ[JOURNAL_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


@tool(read_only=True)
def search(q: str) -> dict[str, Any]:
    """Search the notes."""
    journal(f"search {q}")
    return {"hits": [f"a note about {q}"]}


@tool(destructive=True)
def wipe(target: str) -> dict[str, Any]:
    """Delete everything stored under target."""
    journal(f"wipe {target}")
    return {"wiped": target}


TOOLS = [search, wipe]


def broken_policy(call: ToolCall) -> bool:
    """A guardrail policy whose own lookup fails: the guardrail must refuse."""
    raise ConnectionError("the policy store is unreachable")


class ToolAgent(AgentContract):
    """Runs the loop over ``search`` and ``wipe`` for the prompt in its payload (the model
    simulator follows the ``sim:`` directives in it); its YAML entry sets the middleware."""

    name = "guarded"
    version = "1"
    intents = ("guarded",)

    async def execute(self, context: dict[str, Any]) -> Result:
        payload = context["payload"]
        result = await run_tools(
            model="chat",
            messages=[{"role": "user", "content": payload["prompt"]}],
            tools=TOOLS,
            max_turns=int(payload.get("max_turns", 8)),
            task=context["task"],
        )
        output = {"text": result.text, "stop": result.stop, "calls": result.tool_calls}
        return Result(output=output)


class BrokenGuardAgent(ToolAgent):
    name, intents = "guard_broken", ("guard_broken",)


class TellingGuardAgent(ToolAgent):
    name, intents = "guard_tell", ("guard_tell",)


class LoopingAgent(ToolAgent):
    name, intents = "looping", ("looping",)


class ApprovingAgent(ToolAgent):
    name, intents = "approving", ("approving",)


class LimitedAgent(ToolAgent):
    name, intents = "limited", ("limited",)


GATE_ENV = "TOOLKIT_GATE"


@tool(timeout_s=60)
async def hold(label: str) -> dict[str, Any]:
    """Waits until the file $TOOLKIT_GATE exists (a test kills the worker meanwhile)."""
    journal(f"hold-start {label}")
    while not os.path.exists(os.environ[GATE_ENV]):
        await asyncio.sleep(0.02)
    journal(f"hold-end {label}")
    return {"held": label}


class CrashLoopAgent(AgentContract):
    """The loop over ``search`` and ``hold``: killed while ``hold`` runs, it resumes."""

    name = "crash_loop"
    version = "1"
    intents = ("crash_loop",)

    async def execute(self, context: dict[str, Any]) -> Result:
        result = await run_tools(
            model="chat",
            messages=[{"role": "user", "content": context["payload"]["prompt"]}],
            tools=[search, hold],
            task=context["task"],
        )
        output = {"text": result.text, "stop": result.stop, "calls": result.tool_calls}
        return Result(output=output)
