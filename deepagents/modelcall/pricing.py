"""Cost from the price table (USD per 1,000 tokens) and the token estimate used before a call."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import orjson

from deepagents.config.models import ModelConfig
from deepagents.contract.toolcalls import ToolDefinition

# Chat formats add a few tokens of framing per message (role, separators).
TOKENS_PER_MESSAGE = 4


def cost_usd(model: ModelConfig, tokens_in: int, tokens_out: int) -> float:
    cost = tokens_in * model.price_in_per_1k / 1000 + tokens_out * model.price_out_per_1k / 1000
    # Rounded to a micro-dollar: the unit the Redis budget counters use.
    return round(cost, 6)


def estimate_tokens(text: str, chars_per_token: float) -> int:
    return math.ceil(len(text) / chars_per_token) if text else 0


def sized_messages(
    messages: Sequence[dict[str, Any]], tools: Sequence[ToolDefinition]
) -> list[dict[str, Any]]:
    """The messages as the size estimates see them: the tool calls of assistant messages
    and the offered tools' schemas are input too, counted as text."""
    sized: list[dict[str, Any]] = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            text = _text(message) + orjson.dumps(calls, default=str).decode()
            message = {**message, "content": text}
        sized.append(message)
    if tools:
        schemas = [[t.name, t.description, dict(t.parameters)] for t in tools]
        sized.append({"role": "tools", "content": orjson.dumps(schemas, default=str).decode()})
    return sized


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else str(content or "")


def estimate_input_tokens(messages: Sequence[dict[str, Any]], chars_per_token: float) -> int:
    total = 0
    for message in messages:
        total += estimate_tokens(_text(message), chars_per_token) + TOKENS_PER_MESSAGE
    return total


def input_tokens_bound(messages: Sequence[dict[str, Any]]) -> int:
    """An upper bound on input tokens: no tokenizer in use (byte-level BPE, SentencePiece
    with byte fallback) makes more than one token per UTF-8 byte. What admission and budgets
    reserve, since ``estimate_input_tokens`` can be several times short (CJK, digits, code)."""
    total = 0
    for message in messages:
        text = _text(message)
        role = str(message.get("role") or "")
        total += len(text.encode()) + len(role.encode()) + TOKENS_PER_MESSAGE
    return total
