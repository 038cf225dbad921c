"""Agents the toolkit's end-to-end tests run in real worker processes."""

from __future__ import annotations

from typing import Any

from deepagents import AgentContract, Result
from deepagents.agentkit import run_tools

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
