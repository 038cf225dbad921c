"""Human approval: before a tool marked destructive (its policy, or a glob in the config)
runs, the task asks a person through ``ctx.ask`` and waits, holding no worker slot.

The answer approves the call, edits its arguments (the edited call then runs, through the
rest of the chain), or rejects it (the model is told; the tool never runs). Asked outside
a task, there is nobody to ask: the call is refused (fail closed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, model_validator

from deepagents.agentkit.middleware import AgentMiddleware, ToolHandler, ToolRequest
from deepagents.config.middleware import ApprovalConfig
from deepagents.contract.context import active_context
from deepagents.contract.toolcalls import ToolResult
from deepagents.errors import TaskError


class Verdict(StrEnum):
    APPROVE = "approve"
    EDIT = "edit"
    REJECT = "reject"


class ApprovalReply(BaseModel):
    """What a person answers (``orch.reply(task_id, {...})``)."""

    # The rule "edit needs arguments" in the JSON Schema too: a reply is checked against the
    # schema when it arrives (orch.reply refuses it), not only when the task reads it.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "if": {"properties": {"verdict": {"const": "edit"}}},
            "then": {"required": ["arguments"], "properties": {"arguments": {"type": "object"}}},
        },
    )

    verdict: Verdict
    arguments: dict[str, Any] | None = Field(default=None, description="edit: the new arguments")
    reason: str = Field(default="", max_length=2000)

    @model_validator(mode="after")
    def _edit_has_arguments(self) -> ApprovalReply:
        if self.verdict is Verdict.EDIT and self.arguments is None:
            raise ValueError("edit needs arguments")
        return self


class NobodyToAsk(TaskError):
    """A tool that needs approval was called outside a task: there is no one to ask."""


class Approval(AgentMiddleware):
    name = "approval"

    def __init__(
        self,
        *,
        tools: Sequence[str] = (),
        timeout_s: float = 86_400.0,
        on_timeout: Literal["fail", "reject"] = "fail",
    ) -> None:
        ApprovalConfig(name="approval", tools=tuple(tools), timeout_s=timeout_s)  # bounds
        self.tools, self.timeout_s, self.on_timeout = tuple(tools), timeout_s, on_timeout

    @classmethod
    def from_config(cls, config: ApprovalConfig) -> Approval:
        return cls(tools=config.tools, timeout_s=config.timeout_s, on_timeout=config.on_timeout)

    def needs_approval(self, request: ToolRequest) -> bool:
        tool = request.tool
        if tool is not None and tool.policy.destructive:
            return True
        return any(fnmatchcase(request.call.name, glob) for glob in self.tools)

    async def wrap_tool_call(self, request: ToolRequest, handler: ToolHandler) -> ToolResult:
        if not self.needs_approval(request):
            return await handler(request)
        reply = await self._ask(request)
        call = request.call
        if reply.verdict is Verdict.REJECT:
            content = {"error": "rejected", "message": reply.reason or "a person rejected it"}
            return ToolResult(call.id, call.name, content, is_error=True)
        if reply.verdict is Verdict.EDIT:
            assert reply.arguments is not None  # the reply's schema says so
            request = request.override(call=replace(call, arguments=reply.arguments))
        return await handler(request)

    async def _ask(self, request: ToolRequest) -> ApprovalReply:
        ctx = active_context()
        if ctx is None:
            raise NobodyToAsk(f"tool {request.call.name!r} needs approval, asked outside a task")
        # Parallel calls ask one at a time, in the order they came: questions are numbered
        # by their order in the run, which must be the same on every delivery.
        lock: asyncio.Lock = request.state.memo(self).setdefault("lock", asyncio.Lock())
        call = request.call
        question = (
            f"Run tool {call.name!r} with arguments "
            f"{orjson.dumps(call.arguments, option=orjson.OPT_SORT_KEYS).decode()}?"
        )
        rejected = ApprovalReply(verdict=Verdict.REJECT, reason="nobody answered in time")
        async with lock:
            return await ctx.ask(
                question,
                schema=ApprovalReply,
                timeout_s=self.timeout_s,
                on_timeout="default" if self.on_timeout == "reject" else "fail",
                default=rejected if self.on_timeout == "reject" else None,
            )
