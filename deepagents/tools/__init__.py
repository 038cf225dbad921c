"""Tools: Python callables and MCP servers' tools, called with the guarantees of model calls.

``@tool`` declares a Python tool; ``wrap_tool_call(tool, call, task=..., agent=...)`` calls
one (docs/tools.md). MCP servers' tools: ``deepagents.tools.mcp`` (the ``mcp`` extra).
"""

from deepagents.tools.bounds import JsonBounds
from deepagents.tools.definition import FunctionTool, Tool, ToolPolicy, tool
from deepagents.tools.errors import (
    InvalidToolArguments,
    ToolCallError,
    ToolCircuitOpen,
    ToolDeadlineExceeded,
    ToolFailed,
    ToolProtocolError,
    ToolTimeout,
    ToolUnavailable,
)
from deepagents.tools.ledger import ToolLedger, current_tool_ledger, start_tool_ledger
from deepagents.tools.runtime import ToolCalls, current_tool_calls, use_tool_calls
from deepagents.tools.wrap import arguments_digest, wrap_tool_call

__all__ = [
    "FunctionTool",
    "InvalidToolArguments",
    "JsonBounds",
    "Tool",
    "ToolCallError",
    "ToolCalls",
    "ToolCircuitOpen",
    "ToolDeadlineExceeded",
    "ToolFailed",
    "ToolLedger",
    "ToolPolicy",
    "ToolProtocolError",
    "ToolTimeout",
    "ToolUnavailable",
    "arguments_digest",
    "current_tool_calls",
    "current_tool_ledger",
    "start_tool_ledger",
    "tool",
    "use_tool_calls",
    "wrap_tool_call",
]
