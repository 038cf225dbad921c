"""Tool calls across the model boundary: what a provider is sent about the offered tools,
and the checks a tool call the model asked for passes before anyone runs it.

A model's tool call is input from outside the process, like a gateway request: its
arguments must decode to a JSON object within a size cap, it must name a tool that was
offered, and a reply carries at most ``MAX_TOOL_CALLS`` of them. A call that fails a check
ends the attempt as ``bad_tool_call`` (retried: sampling may get it right the next time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from deepagents.contract.toolcalls import ToolCall, ToolDefinition
from deepagents.modelcall.retrying import ErrorKind, ProviderError

MAX_TOOL_CALLS = 64  # in one reply; more is a model gone astray
MAX_ID_CHARS = 256


def bad_tool_call(why: str) -> ProviderError:
    return ProviderError(ErrorKind.BAD_TOOL_CALL, f"bad_tool_call: {why}", status=200)


def checked_call(
    call_id: Any,
    name: Any,
    arguments: str | Mapping[str, Any] | None,
    tools: Sequence[ToolDefinition],
    max_bytes: int,
) -> ToolCall:
    """A ``ToolCall`` from the provider's pieces: arguments as JSON text (OpenAI) or as an
    already decoded object (Anthropic's ``input``), both held to the same rules."""
    if not isinstance(name, str) or name not in {tool.name for tool in tools}:
        raise bad_tool_call("names a tool that was not offered")
    if not isinstance(call_id, str) or not call_id or len(call_id) > MAX_ID_CHARS:
        raise bad_tool_call("has no usable id")
    if isinstance(arguments, Mapping):
        raw = orjson.dumps(dict(arguments))
    else:
        raw = (arguments or "{}").encode()  # no arguments at all: an empty object
    if len(raw) > max_bytes:
        raise bad_tool_call(f"arguments over {max_bytes} bytes")
    try:
        decoded = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise bad_tool_call("arguments are not JSON") from None
    if not isinstance(decoded, dict):
        raise bad_tool_call("arguments are not a JSON object")
    return ToolCall(id=call_id, name=name, arguments=decoded)


def checked_count(count: int) -> None:
    if count > MAX_TOOL_CALLS:
        raise bad_tool_call(f"more than {MAX_TOOL_CALLS} calls in one reply")


def openai_tools(tools: Sequence[ToolDefinition]) -> list[dict[str, Any]]:
    """The ``tools`` field of a chat-completions request."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": dict(tool.parameters),
            },
        }
        for tool in tools
    ]
