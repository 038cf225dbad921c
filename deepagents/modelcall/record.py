"""What a model call leaves behind: one record per attempt and the reply the caller gets.

The prompt itself is never stored: only its SHA-256 (or HMAC-SHA-256 when a key is set).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

import orjson

from deepagents.contract.events import AuditEvent
from deepagents.contract.result import Result, ResultMetrics
from deepagents.contract.toolcalls import ToolCall


def openai_tool_calls(calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    """The ``tool_calls`` of an assistant message in the OpenAI chat format."""
    return [
        {
            "id": call.id,
            "type": "function",
            "function": {
                "name": call.name,
                "arguments": orjson.dumps(dict(call.arguments)).decode(),
            },
        }
        for call in calls
    ]


def prompt_digest(messages: Sequence[dict[str, Any]], key: bytes | None = None) -> str:
    """Hash of the canonical JSON of the messages; keyed (HMAC) when ``key`` is given."""
    data = orjson.dumps(list(messages), option=orjson.OPT_SORT_KEYS)
    if key:
        return "hmac-sha256:" + hmac.new(key, data, hashlib.sha256).hexdigest()
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One attempt against one model (or a refusal before any attempt, ``attempt=0``)."""

    model: str
    attempt: int
    outcome: str  # "ok", an error class ("transient", "rate_limited", ...) or a gate refusal
    prompt_sha256: str
    request_id: str | None = None
    status_code: int | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_estimated: bool = False
    model_version: str | None = None
    connect_ms: float | None = None
    first_token_ms: float | None = None
    total_ms: float | None = None
    cost_usd: float = 0.0
    retries: int = 0
    wait_before_s: float = 0.0
    started_at: float = 0.0  # monotonic, for tests and latency analysis
    detail: str | None = None  # provider error code or gate reason; never the prompt

    def as_event_fields(self) -> dict[str, Any]:
        fields = asdict(self)
        fields.pop("started_at")
        return fields


class FinishReason(StrEnum):
    """Why the model stopped, in one vocabulary whatever the provider's own word."""

    STOP = "stop"  # a final answer
    TOOL_CALLS = "tool_calls"  # it asks for tools: run them and call again
    LENGTH = "length"  # cut at max_tokens
    CONTENT_FILTER = "content_filter"
    OTHER = "other"  # a word this layer does not know, or none was given


_FINISH_WORDS = {
    "stop": FinishReason.STOP,
    "end_turn": FinishReason.STOP,  # Anthropic
    "stop_sequence": FinishReason.STOP,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
    "tool_use": FinishReason.TOOL_CALLS,
    "length": FinishReason.LENGTH,
    "max_tokens": FinishReason.LENGTH,
    "content_filter": FinishReason.CONTENT_FILTER,
    "refusal": FinishReason.CONTENT_FILTER,
}


def finish_reason(word: str | None, *, has_tool_calls: bool) -> FinishReason:
    """The provider's word in this layer's vocabulary. Tool calls decide: some servers say
    ``stop`` while asking for tools, and the loop must run them either way."""
    if has_tool_calls:
        return FinishReason.TOOL_CALLS
    found = _FINISH_WORDS.get(word or "", FinishReason.OTHER)
    # A "tool_calls" finish with no calls left after checks is not a request for tools.
    return FinishReason.OTHER if found is FinishReason.TOOL_CALLS else found


@dataclass(frozen=True, slots=True)
class ModelReply:
    """The answer of :func:`wrap_model_call` and everything that led to it."""

    text: str
    model: str | None  # which model answered; None when a declared fallback answered
    requested_model: str
    prompt_sha256: str
    degraded: bool = False
    reason: str | None = None  # why the answer is degraded (circuit_open, budget_exhausted, ...)
    attempts: tuple[AttemptRecord, ...] = field(default=())
    tool_calls: tuple[ToolCall, ...] = ()  # empty for a final answer
    finish_reason: FinishReason = FinishReason.STOP  # a declared fallback's answer is final

    def as_message(self) -> dict[str, Any]:
        """The assistant message to append to the history (OpenAI chat format), with the
        tool calls the model asked for; ``content`` is ``None`` when it only asked for tools."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["content"] = self.text or None
            message["tool_calls"] = openai_tool_calls(self.tool_calls)
        return message

    @property
    def tokens_in(self) -> int:
        return sum(a.tokens_in for a in self.attempts)

    @property
    def tokens_out(self) -> int:
        return sum(a.tokens_out for a in self.attempts)

    @property
    def tokens_used(self) -> int:
        return self.tokens_in + self.tokens_out

    @property
    def cost_usd(self) -> float:
        return round(sum(a.cost_usd for a in self.attempts), 6)

    @property
    def calls(self) -> int:
        """Requests that reached a provider (gate refusals are not calls)."""
        return sum(1 for a in self.attempts if a.attempt > 0)

    def metrics(self) -> dict[str, Any]:
        """Keys for ``Result.metrics``: the contract's two plus model-specific ones."""
        return {
            "tokens_used": self.tokens_used,
            "cost_usd": self.cost_usd,
            "model": self.model,
            "model_calls": self.calls,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
        }

    def audit_events(self, task_id: str | None) -> list[AuditEvent]:
        return [
            AuditEvent.of(
                "model_call", task_id, requested_model=self.requested_model, **a.as_event_fields()
            )
            for a in self.attempts
        ]

    def apply(self, result: Result) -> Result:
        """``result`` with this reply's tokens and cost added, and ``degraded`` if it was."""
        merged = result.metrics.model_dump()
        merged["tokens_used"] = merged.get("tokens_used", 0) + self.tokens_used
        merged["cost_usd"] = round(merged.get("cost_usd", 0.0) + self.cost_usd, 6)
        merged["model"] = self.model
        return result.model_copy(
            update={
                "metrics": ResultMetrics.model_validate(merged),
                "degraded": result.degraded or self.degraded,
            }
        )


@dataclass(frozen=True, slots=True)
class EmbeddingReply:
    """The answer of :func:`embed` to one caller: its own vectors, in input order, and its
    share of the batch's attempts (tokens and cost in proportion to its inputs)."""

    vectors: tuple[tuple[float, ...], ...]
    model: str
    prompt_sha256: str  # of this caller's inputs
    batch_inputs: int  # how many inputs the request that answered carried (all callers')
    attempts: tuple[AttemptRecord, ...] = field(default=())

    @property
    def tokens_in(self) -> int:
        return sum(a.tokens_in for a in self.attempts)

    @property
    def tokens_used(self) -> int:
        return self.tokens_in

    @property
    def cost_usd(self) -> float:
        return round(sum(a.cost_usd for a in self.attempts), 6)
