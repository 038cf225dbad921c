"""What a middleware sees and the class it subclasses (LangChain 1.x's hook names and order).

A middleware overrides any of six async hooks::

    before_agent(state)                 once, before the first model call
    before_model(state)                 before each model call
    wrap_model_call(request, handler)   around each model call
    after_model(state)                  after each model call (its answer is in state.messages)
    wrap_tool_call(request, handler)    around each tool call
    after_agent(state)                  once, when the loop ends

``before_*`` run first to last, ``after_*`` last to first; wrap hooks nest, the first
middleware outermost. A wrap hook may call ``handler`` zero times (answer itself), once, or
several times (retry, or a side call such as a summary). A node hook may return
``Jump.end(reason)`` to end the loop; raising ends the run (a guard that cannot decide must
raise or refuse, never let the call through: fail closed).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from deepagents.contract.task import Task
from deepagents.contract.toolcalls import ToolCall, ToolDefinition, ToolResult
from deepagents.modelcall.record import openai_tool_calls
from deepagents.tools.definition import Tool


class JumpTo(StrEnum):
    END = "end"  # stop the loop now; the run ends with what it has


@dataclass(frozen=True, slots=True)
class Jump:
    """A node hook's word to the loop."""

    to: JumpTo
    reason: str = ""

    @classmethod
    def end(cls, reason: str) -> Jump:
        return cls(JumpTo.END, reason)


@dataclass
class AgentState:
    """One run of the loop: the conversation so far and what it has used. Middleware may
    edit ``messages`` in a node hook; per-run notes go in ``memo(self)`` (a middleware object
    is shared by every task of the agent, so it keeps nothing of a run on itself)."""

    agent: str
    model: str
    messages: list[dict[str, Any]]
    tools: Mapping[str, Tool]
    task: Task | None = None
    model_calls: int = 0
    tool_calls: int = 0
    _memos: dict[int, dict[str, Any]] = field(default_factory=dict, repr=False)

    def memo(self, owner: object) -> dict[str, Any]:
        """A dict that belongs to ``owner`` for this run."""
        return self._memos.setdefault(id(owner), {})


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One model call as the chain sees it; ``override`` makes a changed copy."""

    model: str
    messages: Sequence[Mapping[str, Any]]
    tools: tuple[ToolDefinition, ...]
    state: AgentState

    def override(self, **changes: Any) -> ModelRequest:
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """A model's answer: text, and the tool calls it asks for (none: a final answer)."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    model: str | None = None
    degraded: bool = False

    @property
    def final(self) -> bool:
        return not self.tool_calls

    def as_message(self) -> dict[str, Any]:
        """The assistant message to append to the history (OpenAI chat format)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["content"] = self.text or None
            message["tool_calls"] = openai_tool_calls(self.tool_calls)
        return message

    def to_json(self) -> dict[str, Any]:
        """What a step records (and ``from_json`` reads back on a later delivery)."""
        calls = [
            {"id": c.id, "name": c.name, "arguments": dict(c.arguments)} for c in self.tool_calls
        ]
        return {
            "text": self.text,
            "tool_calls": calls,
            "model": self.model,
            "degraded": self.degraded,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelResponse:
        calls = tuple(ToolCall(c["id"], c["name"], c["arguments"]) for c in data["tool_calls"])
        return cls(data["text"], calls, data.get("model"), bool(data.get("degraded")))


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """One tool call as the chain sees it: the call and the tool (None: no such tool)."""

    call: ToolCall
    tool: Tool | None
    state: AgentState

    def override(self, **changes: Any) -> ToolRequest:
        return replace(self, **changes)


ModelHandler = Callable[[ModelRequest], Awaitable[ModelResponse]]
ToolHandler = Callable[[ToolRequest], Awaitable[ToolResult]]


class AgentMiddleware:
    """Subclass it and override the hooks you need; the others cost nothing (the chain
    skips a hook a class does not override). ``name`` labels it in errors and docs."""

    name: str = "middleware"

    async def before_agent(self, state: AgentState) -> Jump | None:
        return None

    async def before_model(self, state: AgentState) -> Jump | None:
        return None

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> ModelResponse:
        return await handler(request)

    async def after_model(self, state: AgentState) -> Jump | None:
        return None

    async def wrap_tool_call(self, request: ToolRequest, handler: ToolHandler) -> ToolResult:
        return await handler(request)

    async def after_agent(self, state: AgentState) -> Jump | None:
        return None
