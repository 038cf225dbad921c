"""Limits: model calls and tool calls per run of the loop; one more ends the task
``limit_exceeded`` before it is made."""

from __future__ import annotations

from deepagents.agentkit.middleware import (
    AgentMiddleware,
    ModelHandler,
    ModelRequest,
    ModelResponse,
    ToolHandler,
    ToolRequest,
)
from deepagents.config.middleware import LimitsConfig
from deepagents.contract.toolcalls import ToolResult
from deepagents.errors import LimitExceeded


class Limits(AgentMiddleware):
    name = "limits"

    def __init__(self, *, model_calls: int | None = None, tool_calls: int | None = None) -> None:
        LimitsConfig(name="limits", model_calls=model_calls, tool_calls=tool_calls)  # bounds
        self.model_calls, self.tool_calls = model_calls, tool_calls

    @classmethod
    def from_config(cls, config: LimitsConfig) -> Limits:
        return cls(model_calls=config.model_calls, tool_calls=config.tool_calls)

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> ModelResponse:
        self._count(request.state.memo(self), "model_calls", self.model_calls)
        return await handler(request)

    async def wrap_tool_call(self, request: ToolRequest, handler: ToolHandler) -> ToolResult:
        self._count(request.state.memo(self), "tool_calls", self.tool_calls)
        return await handler(request)

    @staticmethod
    def _count(memo: dict[str, int], what: str, limit: int | None) -> None:
        memo[what] = used = memo.get(what, 0) + 1
        if limit is not None and used > limit:
            raise LimitExceeded(f"more than {limit} {what.replace('_', ' ')} in this task")
