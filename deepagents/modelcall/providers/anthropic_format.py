"""The OpenAI chat format (the lingua franca of this layer) as an Anthropic Messages request.

- ``system`` (and ``developer``) messages become the top-level ``system`` text;
- an assistant's ``tool_calls`` become ``tool_use`` blocks (arguments decoded to ``input``);
- ``tool`` messages become ``tool_result`` blocks of a user turn (``is_error`` is kept when
  the message sets it, an extension of the OpenAI format);
- consecutive messages of one role are merged, since the API wants turns to alternate.

A message that cannot be translated (an assistant tool call whose arguments are not a JSON
object, an unknown role) is refused as ``InvalidRequest`` before anything is sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from deepagents.contract.toolcalls import ToolDefinition
from deepagents.modelcall.retrying import ErrorKind, ProviderError

_SYSTEM_ROLES = frozenset({"system", "developer"})


def untranslatable(why: str) -> ProviderError:
    return ProviderError(ErrorKind.INVALID, f"untranslatable_message: {why}")


def anthropic_request(
    messages: Sequence[dict[str, Any]], tools: Sequence[ToolDefinition]
) -> dict[str, Any]:
    """``system``, ``messages`` (and ``tools`` when offered) of a Messages API request."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role in _SYSTEM_ROLES:
            system.append(_text(message.get("content")))
        elif role == "user":
            _append(turns, "user", _blocks(message.get("content")))
        elif role == "assistant":
            _append(turns, "assistant", _assistant_blocks(message))
        elif role == "tool":
            _append(turns, "user", [_tool_result(message)])
        else:
            raise untranslatable(f"role {role!r}")
    request: dict[str, Any] = {"messages": turns}
    if system:
        request["system"] = "\n\n".join(system)
    if tools:
        request["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
            for t in tools
        ]
    return request


def _append(turns: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    if turns and turns[-1]["role"] == role:
        turns[-1]["content"].extend(blocks)
    else:
        turns.append({"role": role, "content": blocks})


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _blocks(content: Any) -> list[dict[str, Any]]:
    text = _text(content)
    return [{"type": "text", "text": text}] if text else []


def _assistant_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = _blocks(message.get("content"))
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise untranslatable("a tool call without a function")
        try:
            arguments = orjson.loads(function.get("arguments") or "{}")
        except (orjson.JSONDecodeError, TypeError):
            raise untranslatable("tool call arguments are not JSON") from None
        if not isinstance(arguments, dict):
            raise untranslatable("tool call arguments are not a JSON object")
        blocks.append(
            {
                "type": "tool_use",
                "id": str(call.get("id")),
                "name": str(function.get("name")),
                "input": arguments,
            }
        )
    return blocks


def _tool_result(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": str(message.get("tool_call_id")),
        "content": content if isinstance(content, str) else orjson.dumps(content).decode(),
    }
    if message.get("is_error"):
        block["is_error"] = True
    return block
