"""Limits: model calls and tool calls per run of the loop; one more ends the task
``limit_exceeded`` before it is made.

``cost_usd`` and ``tokens`` bound the task's spend scope: the usage ledger of the task,
which holds its own model calls, those of steps an earlier delivery recorded, and those of
its children (``ctx.delegate`` carries each child's ``Result.metrics`` into it when the
parent reads the child's result). Once the scope reached a limit, no model or tool call is
made: the spend already made cannot be taken back, the next is refused."""

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
from deepagents.modelcall.usage import current_usage


class Limits(AgentMiddleware):
    name = "limits"

    def __init__(
        self,
        *,
        model_calls: int | None = None,
        tool_calls: int | None = None,
        cost_usd: float | None = None,
        tokens: int | None = None,
    ) -> None:
        LimitsConfig(  # the same bounds as the YAML's
            name="limits", model_calls=model_calls, tool_calls=tool_calls,
            cost_usd=cost_usd, tokens=tokens,
        )  # fmt: skip
        self.model_calls, self.tool_calls = model_calls, tool_calls
        self.cost_usd, self.tokens = cost_usd, tokens

    @classmethod
    def from_config(cls, config: LimitsConfig) -> Limits:
        return cls(
            model_calls=config.model_calls, tool_calls=config.tool_calls,
            cost_usd=config.cost_usd, tokens=config.tokens,
        )  # fmt: skip

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> ModelResponse:
        self._spend_left("model call")
        self._count(request.state.memo(self), "model_calls", self.model_calls)
        return await handler(request)

    async def wrap_tool_call(self, request: ToolRequest, handler: ToolHandler) -> ToolResult:
        self._spend_left("tool call")
        self._count(request.state.memo(self), "tool_calls", self.tool_calls)
        return await handler(request)

    @staticmethod
    def _count(memo: dict[str, int], what: str, limit: int | None) -> None:
        memo[what] = used = memo.get(what, 0) + 1
        if limit is not None and used > limit:
            raise LimitExceeded(f"more than {limit} {what.replace('_', ' ')} in this task")

    def _spend_left(self, what: str) -> None:
        """Refuse the next call once the task's spend scope reached a limit."""
        if self.cost_usd is None and self.tokens is None:
            return
        ledger = current_usage()
        if ledger is None:
            return  # outside a task: nothing is metered
        carried = (
            f" (${ledger.carried_cost_usd:.6g} and {ledger.carried_tokens} tokens of it "
            "from its children and earlier steps)"
        )
        if self.cost_usd is not None and ledger.cost_usd >= self.cost_usd:
            raise LimitExceeded(
                f"this task spent ${ledger.cost_usd:.6g} of its cost_usd limit "
                f"${self.cost_usd:.6g}{carried}: no further {what}"
            )
        if self.tokens is not None and ledger.tokens_used >= self.tokens:
            raise LimitExceeded(
                f"this task used {ledger.tokens_used} tokens of its tokens limit "
                f"{self.tokens}{carried}: no further {what}"
            )
