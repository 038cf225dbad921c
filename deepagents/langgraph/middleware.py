"""``DeepAgentsMiddleware``: LangChain's ``create_agent`` graphs on deepagents' calls.

``create_agent`` (langchain v1) runs a model node and a tool node; its middleware wraps
each call. This one makes every model call ``wrap_model_call``'s (the request's model is
replaced by a ``DeepAgentsChat`` for the configured model: gates, budget, breaker,
fallback, usage in the task's Result) and every tool call ``wrap_tool_call``'s (timeout,
retries by the tool's policy, the fleet's breaker, audit, metrics), each a step named by
the node's LangGraph task (``scope.py``): a node re-run after a crash replays the calls
that had completed, and a tool is not called again.

Tools built by ``graph_tools`` (``GraphKit.tools``) are steps already and pass through.
Any other LangChain tool runs through ``wrap_tool_call`` as a deepagents ``Tool`` with the
middleware's ``policy`` (by default one attempt: a LangChain tool says nothing of being
safe to repeat). Its result is recorded as the tool message's content, so a tool that
answers with a ``Command`` cannot be replayed and is refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from deepagents.contract.context import active_context
from deepagents.contract.task import Task
from deepagents.contract.toolcalls import ToolCall, ToolDefinition
from deepagents.errors import StepError
from deepagents.langgraph.chat_model import DeepAgentsChat
from deepagents.langgraph.scope import step_name
from deepagents.langgraph.tools import STEP_TOOL, digest
from deepagents.tools import Tool, ToolFailed, ToolPolicy, wrap_tool_call

ModelHandler = Callable[[ModelRequest], Awaitable[ModelResponse]]
ToolHandler = Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]


class DeepAgentsMiddleware(AgentMiddleware):
    """``model`` is a name under ``models:``; ``task`` and ``agent`` file the calls (as
    ``GraphKit`` gives them: ``kit.middleware(model)``)."""

    def __init__(
        self,
        model: str,
        *,
        task: Task | None = None,
        agent: str = "unknown",
        policy: ToolPolicy | None = None,
    ) -> None:
        super().__init__()
        self.chat = DeepAgentsChat(model=model, agent=agent, task=task)
        self.task, self.agent = task, agent
        self.policy = policy or ToolPolicy(retries=0)

    @property
    def name(self) -> str:
        return "deepagents"

    async def awrap_model_call(
        self, request: ModelRequest, handler: ModelHandler
    ) -> ModelResponse | AIMessage:
        # The chat model is a step of its own (chat_model.py): the node's re-run replays it.
        return await handler(request.override(model=self.chat))

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: ToolHandler
    ) -> ToolMessage | Command[Any]:
        tool = request.tool
        if tool is not None and (tool.metadata or {}).get(STEP_TOOL):
            return await handler(request)  # graph_tools: a step through wrap_tool_call already
        call = request.tool_call
        arguments = dict(call.get("args") or {})
        name = call["name"]
        step = step_name(f"tool:langchain/{name}:{digest(arguments)}")
        adapted = _HandlerTool(request, handler, self.policy)
        ctx = active_context()
        if ctx is None:
            answer = await self._call(adapted, arguments, step)
        else:
            answer = await ctx.step(step, self._call, adapted, arguments, step)
        return ToolMessage(
            content=answer["content"],
            tool_call_id=call.get("id") or "",
            name=name,
            status="error" if answer["error"] else "success",
        )

    async def _call(
        self, tool: _HandlerTool, arguments: dict[str, Any], step: str
    ) -> dict[str, Any]:
        result = await wrap_tool_call(
            tool, ToolCall(step, tool.name, arguments), task=self.task, agent=self.agent
        )
        # A failed call is the model's to read, as run_tools feeds it back.
        content = result.content if isinstance(result.content, str) else str(result.content)
        return {"content": content, "error": result.is_error}


class _HandlerTool(Tool):
    """A LangChain tool call as a deepagents ``Tool``: ``invoke`` runs the graph's handler
    (the ToolNode's own execution of the tool) and answers with the message's content."""

    def __init__(self, request: ToolCallRequest, handler: ToolHandler, policy: ToolPolicy) -> None:
        self.request, self.handler, self.policy = request, handler, policy
        tool: BaseTool | None = request.tool
        name = request.tool_call["name"]
        description = (tool.description if tool is not None else "") or name
        parameters = _parameters(tool)
        self.definition = ToolDefinition(name, description, parameters)
        self.server = "langchain"

    async def invoke(self, arguments: dict[str, Any], *, idempotency_key: str | None) -> Any:
        call = self.request.tool_call.copy()
        call["args"] = arguments
        message = await self.handler(self.request.override(tool_call=call))
        if not isinstance(message, ToolMessage):
            raise StepError(
                f"tool {self.name!r} answered with a {type(message).__name__}: under "
                "DeepAgentsMiddleware a tool answers with a message (its content is replayed)"
            )
        if message.status == "error":  # the ToolNode caught the tool's exception
            raise ToolFailed(str(message.content)[:2000])
        return message.content


def _parameters(tool: BaseTool | None) -> dict[str, Any]:
    if tool is None:
        return {"type": "object"}
    try:
        schema = convert_to_openai_tool(tool)["function"].get("parameters")
    except (AttributeError, TypeError, ValueError):
        schema = None
    return dict(schema) if isinstance(schema, dict) else {"type": "object"}
