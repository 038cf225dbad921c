"""``run_tools``: the tool-calling loop. The model is called through the chain; the tool
calls it asks for run through the chain (in parallel when it asks for several), their
results go back to it, until it answers without tools, ``max_turns`` model calls were
made, or a middleware says stop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

import orjson

from deepagents.agentkit.calls import call_model, call_tool
from deepagents.agentkit.chain import Chain
from deepagents.agentkit.configured import current_agent_chain
from deepagents.agentkit.middleware import (
    AgentMiddleware,
    AgentState,
    ModelRequest,
    ToolRequest,
)
from deepagents.contract.context import active_context
from deepagents.contract.task import Task
from deepagents.contract.toolcalls import ToolCall, ToolResult
from deepagents.tools.definition import Tool

T = TypeVar("T")


class StopReason(StrEnum):
    FINAL_ANSWER = "final_answer"  # the model answered without asking for tools
    MAX_TURNS = "max_turns"  # max_turns model calls were made
    MIDDLEWARE = "middleware"  # a middleware's hook said Jump.end


@dataclass(frozen=True, slots=True)
class LoopResult:
    text: str  # the model's last answer
    messages: list[dict[str, Any]]  # the whole history, the last answer included
    stop: StopReason
    reason: str  # a middleware's reason, when it stopped the loop
    model_calls: int
    tool_calls: int


async def run_tools(
    *,
    model: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Tool] = (),
    max_turns: int = 10,
    middleware: Sequence[AgentMiddleware] = (),
    task: Task | None = None,
    agent: str | None = None,
) -> LoopResult:
    """Run the loop for ``model`` from ``messages`` with ``tools``.

    The chain is the agent's (its YAML ``middleware:`` and its class's ``middleware``, when
    a worker runs it) followed by ``middleware``. ``task`` gives the calls their deadline
    and tenant. Raises what a middleware raises to end the task (``GuardrailDenied``,
    ``LoopDetected``, ``LimitExceeded``) and what a model or tool call raises for the task.
    """
    if max_turns < 1:
        raise ValueError("max_turns must be >= 1")
    configured = current_agent_chain()
    chain = Chain(middleware)
    if configured is not None and configured.chain is not None:
        chain = configured.chain + chain if middleware else configured.chain
    by_name = {tool.definition.name: tool for tool in tools}
    if len(by_name) != len(tools):
        raise ValueError("two tools have the same name")
    state = AgentState(
        agent=agent or (configured.agent if configured else "unknown"),
        model=model,
        messages=[dict(m) for m in messages],
        tools=by_name,
        task=task,
    )
    return await _Run(chain, state).run(max_turns)


class _Run:
    def __init__(self, chain: Chain, state: AgentState) -> None:
        self.chain, self.state = chain, state
        self.definitions = tuple(tool.definition for tool in state.tools.values())
        self.call_model = chain.model_handler(call_model)
        self.call_tool = chain.tool_handler(call_tool)

    async def run(self, max_turns: int) -> LoopResult:
        chain, state = self.chain, self.state
        text = ""
        jump = await chain.before_agent(state)
        stop = StopReason.MIDDLEWARE if jump else StopReason.MAX_TURNS
        turns = 0
        while jump is None and turns < max_turns:
            jump = await chain.before_model(state)
            if jump is not None:
                break
            request = ModelRequest(state.model, state.messages, self.definitions, state)
            response = await self.call_model(request)
            state.model_calls += 1
            turns += 1
            state.messages.append(response.as_message())
            text = response.text
            jump = await chain.after_model(state)
            if jump is not None:
                break
            if response.final:
                stop = StopReason.FINAL_ANSWER
                break
            if turns >= max_turns:
                break  # no model call is left to read their results: the tools do not run
            await self._run_calls(response.tool_calls)
        if jump is not None:
            stop = StopReason.MIDDLEWARE
        await chain.after_agent(state)
        return LoopResult(
            text, state.messages, stop, jump.reason if jump else "", state.model_calls,
            state.tool_calls,
        )  # fmt: skip

    async def _run_calls(self, calls: Sequence[ToolCall]) -> None:
        state = self.state
        state.tool_calls += len(calls)
        runs = [self.call_tool(ToolRequest(c, state.tools.get(c.name), state)) for c in calls]
        results = await _together(runs)
        state.messages.extend(tool_message(result) for result in results)


async def _together(runs: list[Awaitable[T]]) -> list[T]:
    """In parallel: branches of the task's steps (deterministic step ids), else plain tasks.
    The first failure cancels the others and is raised."""
    if len(runs) == 1:
        return [await runs[0]]
    ctx = active_context()
    if ctx is not None:
        return await ctx.gather(*runs)
    tasks = [asyncio.ensure_future(run) for run in runs]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def tool_message(result: ToolResult) -> dict[str, Any]:
    """A tool's answer as the model reads it (OpenAI chat format)."""
    content = result.content
    text = content if isinstance(content, str) else orjson.dumps(content).decode()
    return {"role": "tool", "tool_call_id": result.call_id, "content": text}
