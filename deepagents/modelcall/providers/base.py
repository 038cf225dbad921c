"""The provider interface: one attempt of one chat completion, timed and classified.

A provider owns no connection pool and no retry loop: it gets the shared ``httpx`` client
and the attempt's deadlines, and either returns a ``Completion`` or raises
``ProviderError`` (already classified by what retrying can change).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from deepagents.contract.toolcalls import ToolCall, ToolDefinition


@dataclass(frozen=True, slots=True)
class AttemptSpec:
    """Everything one attempt needs. Deadlines are ``loop.time()`` values."""

    url: str
    model_id: str
    messages: Sequence[dict[str, Any]]
    max_tokens: int
    stream: bool
    api_key: str | None
    request_id: str
    deadline: float  # the attempt ends here at the latest
    connect_s: float
    first_token_s: float
    per_token_s: float
    extra: dict[str, Any] = field(default_factory=dict)  # temperature, stop, ... (no prompt)
    max_response_bytes: int = 4 * 1024 * 1024  # a larger body is response_too_large
    max_line_bytes: int = 256 * 1024  # so is a longer stream line
    tools: Sequence[ToolDefinition] = ()  # offered to the model; calls must name one of them
    max_tool_call_bytes: int = 65_536  # one call's arguments, as JSON text


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    tokens_in: int | None  # from the response's usage; None when it did not say
    tokens_out: int | None
    model_version: str | None
    status_code: int
    connect_ms: float | None
    first_token_ms: float | None
    total_ms: float
    finish_reason: str | None = None  # the provider's own word (stop, tool_calls, end_turn...)
    tool_calls: tuple[ToolCall, ...] = ()  # validated: offered names, JSON-object arguments
    vectors: tuple[tuple[float, ...], ...] = ()  # embeddings: one per input, in input order


class Provider(Protocol):
    path: str  # appended to the model's base_url: the endpoint of one completion

    async def complete(self, client: httpx.AsyncClient, spec: AttemptSpec) -> Completion: ...
