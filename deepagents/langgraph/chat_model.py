"""``DeepAgentsChat``: a LangChain chat model whose calls are ``wrap_model_call``'s.

A graph's model calls get what every deepagents model call gets (gates, budget, breaker,
fallback, audit, usage in the task's Result). Inside a task each call is a step named by the
node's LangGraph task (``scope.py``): a node re-run after a crash replays the recorded reply.
Messages travel in the OpenAI chat format, the toolkit's lingua franca.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.messages.utils import convert_to_openai_messages
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict

from deepagents.contract.context import active_context
from deepagents.contract.task import Task
from deepagents.contract.toolcalls import ToolDefinition
from deepagents.langgraph.scope import step_name
from deepagents.modelcall import wrap_model_call


class DeepAgentsChat(BaseChatModel):
    """``model`` is a name under ``models:`` in the deployment's config."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    model: str
    agent: str = "unknown"
    task: Task | None = None

    @property
    def _llm_type(self) -> str:
        return "deepagents"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        raise NotImplementedError("DeepAgentsChat is async: run the graph with ainvoke")

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        chat = convert_to_openai_messages(messages)
        tools = [_definition(t) for t in kwargs.get("tools", ())]
        ctx = active_context()
        if ctx is None:
            reply = await self._call(chat, tools)
        else:
            reply = await ctx.step(step_name(f"model:{self.model}"), self._call, chat, tools)
        message = AIMessage(
            content=reply["text"],
            tool_calls=[
                {"id": c["id"], "name": c["name"], "args": c["arguments"], "type": "tool_call"}
                for c in reply["tool_calls"]
            ],
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _call(
        self, chat: list[dict[str, Any]], tools: list[ToolDefinition]
    ) -> dict[str, Any]:
        reply = await wrap_model_call(
            self.model, chat, tools=tools or None, task=self.task, agent=self.agent
        )
        calls = [
            {"id": c.id, "name": c.name, "arguments": dict(c.arguments)} for c in reply.tool_calls
        ]
        return {"text": reply.text, "tool_calls": calls}


def _definition(openai_tool: dict[str, Any]) -> ToolDefinition:
    function = openai_tool["function"]
    return ToolDefinition(
        function["name"], function.get("description", ""), function.get("parameters", {})
    )
