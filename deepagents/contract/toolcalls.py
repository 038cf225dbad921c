"""The vocabulary a model and its tools share: what a tool is declared as, what a model asks
for, and what a tool answers. Pure data: the model-call layer (which speaks providers), the
tool layer (which runs tools) and the agent loop (which joins them) all use these types, and
none of them imports the others for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """What a model is told about a tool: its name, what it does, and the JSON Schema of its
    arguments (an object schema)."""

    name: str
    description: str
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call a model asked for: the provider's call id, the tool's name, the decoded
    arguments (a JSON object)."""

    id: str
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool answered to one call. ``content`` is JSON; ``is_error`` marks an answer
    the model should read as a failure (a tool's own error, or a refusal by a middleware)."""

    call_id: str
    name: str
    content: Any
    is_error: bool = False
