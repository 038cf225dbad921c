"""The agent toolkit: the middleware chain (LangChain 1.x hook names and order), its
built-ins, and ``run_tools``, the tool-calling loop (docs/tools.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from deepagents._internal.lazy import lazy_exports

if TYPE_CHECKING:
    from deepagents.agentkit.approval import Approval, ApprovalReply, Verdict
    from deepagents.agentkit.budget import ContextBudget
    from deepagents.agentkit.chain import Chain
    from deepagents.agentkit.guardrail import Guardrail
    from deepagents.agentkit.limits import Limits
    from deepagents.agentkit.loop import LoopResult, StopReason, run_tools
    from deepagents.agentkit.loop_detection import LoopDetection
    from deepagents.agentkit.middleware import (
        AgentMiddleware,
        AgentState,
        Jump,
        JumpTo,
        ModelHandler,
        ModelRequest,
        ModelResponse,
        ToolHandler,
        ToolRequest,
    )
    from deepagents.agentkit.pii import PiiRedaction

# Each exported name and the module that defines it: loaded on first use, so the worker, which
# needs only the configured chain, does not import the tool loop and the model-call client.
_EXPORTS: dict[str, str] = {
    "AgentMiddleware": "deepagents.agentkit.middleware",
    "AgentState": "deepagents.agentkit.middleware",
    "Approval": "deepagents.agentkit.approval",
    "ApprovalReply": "deepagents.agentkit.approval",
    "Chain": "deepagents.agentkit.chain",
    "ContextBudget": "deepagents.agentkit.budget",
    "Guardrail": "deepagents.agentkit.guardrail",
    "Jump": "deepagents.agentkit.middleware",
    "JumpTo": "deepagents.agentkit.middleware",
    "Limits": "deepagents.agentkit.limits",
    "LoopDetection": "deepagents.agentkit.loop_detection",
    "LoopResult": "deepagents.agentkit.loop",
    "ModelHandler": "deepagents.agentkit.middleware",
    "ModelRequest": "deepagents.agentkit.middleware",
    "ModelResponse": "deepagents.agentkit.middleware",
    "PiiRedaction": "deepagents.agentkit.pii",
    "StopReason": "deepagents.agentkit.loop",
    "ToolHandler": "deepagents.agentkit.middleware",
    "ToolRequest": "deepagents.agentkit.middleware",
    "Verdict": "deepagents.agentkit.approval",
    "run_tools": "deepagents.agentkit.loop",
}

__all__ = [
    "AgentMiddleware",
    "AgentState",
    "Approval",
    "ApprovalReply",
    "Chain",
    "ContextBudget",
    "Guardrail",
    "Jump",
    "JumpTo",
    "Limits",
    "LoopDetection",
    "LoopResult",
    "ModelHandler",
    "ModelRequest",
    "ModelResponse",
    "PiiRedaction",
    "StopReason",
    "ToolHandler",
    "ToolRequest",
    "Verdict",
    "run_tools",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS, __all__)
