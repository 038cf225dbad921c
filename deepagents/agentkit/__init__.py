"""The agent toolkit: the middleware chain (LangChain 1.x hook names and order), its
built-ins, and ``run_tools``, the tool-calling loop (docs/tools.md)."""

from deepagents.agentkit.approval import Approval, ApprovalReply, Verdict
from deepagents.agentkit.budget import ContextBudget
from deepagents.agentkit.chain import Chain
from deepagents.agentkit.guardrail import Guardrail
from deepagents.agentkit.limits import Limits
from deepagents.agentkit.loop import LoopResult, StopReason, run_tools
from deepagents.agentkit.loops import LoopDetection
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
