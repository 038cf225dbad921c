"""deepagents ``Tool``s as LangChain tools a graph's nodes call (``ToolNode``, or by hand).

Each call goes through ``wrap_tool_call`` (timeout, retries by policy, the fleet's breaker,
audit, metrics). Inside a task it is a step named by the node's LangGraph task
(``scope.py``): a node re-run after a crash gets the recorded result of a call that had
completed, and the tool is not called again; the step key is the tool's idempotency key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool

from deepagents.contract.context import active_context
from deepagents.contract.task import Task
from deepagents.contract.toolcalls import ToolCall
from deepagents.langgraph.scope import step_name
from deepagents.tools import Tool, arguments_digest, wrap_tool_call

# Metadata of the LangChain tools made here: their calls are steps already
# (DeepAgentsMiddleware lets them pass).
STEP_TOOL = "deepagents_step"


def graph_tools(tools: Sequence[Tool], *, task: Task | None, agent: str) -> list[BaseTool]:
    return [graph_tool(tool, task=task, agent=agent) for tool in tools]


def graph_tool(tool: Tool, *, task: Task | None, agent: str) -> BaseTool:
    async def call(**arguments: Any) -> Any:
        # The arguments' digest too: calls a node makes at once (ToolNode gathers them)
        # replay by what they asked, whatever order they start in.
        name = step_name(f"tool:{tool.server}/{tool.name}:{digest(arguments)}")
        ctx = active_context()
        if ctx is None:
            return await _call(tool, arguments, name, task, agent)
        # The step holds the call: wrap_tool_call sees it runs inside one, makes no step of
        # its own, and hands the step key to the tool.
        return await ctx.step(name, _call, tool, arguments, name, task, agent)

    return StructuredTool.from_function(
        coroutine=call,
        name=tool.name,
        description=tool.definition.description or tool.name,
        args_schema=dict(tool.definition.parameters),
        metadata={STEP_TOOL: True},
    )


async def _call(
    tool: Tool, arguments: dict[str, Any], name: str, task: Task | None, agent: str
) -> Any:
    result = await wrap_tool_call(
        tool, ToolCall(name, tool.name, arguments), task=task, agent=agent
    )
    # A failed call is the model's to read (as run_tools feeds it back), not an exception.
    return result.content


def digest(arguments: dict[str, Any]) -> str:
    """A short digest of a call's arguments, for its step name."""
    try:
        return arguments_digest(arguments)[:16]
    except TypeError:  # not JSON: wrap_tool_call refuses it as the model's error anyway
        return "nonjson"
