"""What a tool call can end in, as exceptions with their ``ErrorCode``.

``wrap_tool_call`` turns a tool's own failure into a ``ToolResult`` with ``is_error`` (the
model reads it and may try otherwise); only what the task should end with, or wait out, is
raised: ``ToolCircuitOpen`` (the fleet's breaker for the tool is open: the task waits, its
delivery not counted) and ``ToolDeadlineExceeded`` (the task's deadline passed).
"""

from __future__ import annotations

from deepagents.errors import ErrorCode, RetryableError, TaskError


class ToolCallError(TaskError):
    """A tool call failed; ``code`` says how. Raised inside the tool layer, and to the agent
    only for the failures the task ends with or waits out."""

    code = ErrorCode.TOOL_ERROR


class ToolFailed(ToolCallError):
    """The tool ran and reported a failure (a Python exception, an MCP ``isError``)."""


class InvalidToolArguments(ToolCallError):
    """The arguments break the tool's input schema or the bounds on JSON from outside."""

    code = ErrorCode.TOOL_INVALID_ARGUMENTS


class ToolProtocolError(ToolCallError):
    """A tool's server answered something that is not a valid answer (garbage, a schema
    that is no schema, a result out of bounds)."""

    code = ErrorCode.TOOL_PROTOCOL_ERROR


class ToolUnavailable(ToolCallError):
    """The tool, or the server that serves it, cannot be reached: not configured, not
    started, died mid-call, or the connection broke."""

    code = ErrorCode.TOOL_UNAVAILABLE
    retryable = True


class ToolTimeout(ToolCallError):
    """The call ran past the tool's own ``timeout_s`` cap."""

    code = ErrorCode.TOOL_TIMEOUT
    retryable = True


class ToolDeadlineExceeded(ToolCallError):
    """The task's deadline passed before the tool answered."""

    code = ErrorCode.DEADLINE_EXCEEDED


class ToolCircuitOpen(ToolCallError, RetryableError):
    """The fleet's circuit breaker for this tool is open: the tool was not called. The task
    waits ``retry_after_s`` and comes back with the same attempt (``counted`` is False)."""

    code = ErrorCode.TOOL_UNAVAILABLE
    counted = False
