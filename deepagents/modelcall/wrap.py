"""``wrap_model_call``: one LLM call, reliable, bounded, metered and traced.

Gates → attempts (retries, timeouts, 401 refresh) → record, for the requested model and
then, if it cannot answer now, each model of its fallback chain; when none answers, the
declared fallback (a static text or a function) answers and the reply is ``degraded``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from deepagents.config.models import FallbackConfig, ModelKind
from deepagents.contract.task import Task, utcnow
from deepagents.contract.toolcalls import ToolDefinition
from deepagents.modelcall.attempts import CallContext, ModelAttempts, Refused
from deepagents.modelcall.calls import ModelCalls
from deepagents.modelcall.errors import (
    InvalidRequest,
    ModelCallError,
    ModelDeadlineExceeded,
    ModelUnavailable,
    ResponseTooLarge,
)
from deepagents.modelcall.providers.base import Completion
from deepagents.modelcall.record import ModelReply, finish_reason, prompt_digest
from deepagents.modelcall.usage import current_model_calls, current_usage


@dataclass(frozen=True, slots=True)
class FallbackInfo:
    """What a fallback function is told: which model was asked and why nothing answered."""

    model: str
    reason: str
    messages: Sequence[dict[str, Any]]


Fallback = str | Callable[[FallbackInfo], str | Awaitable[str]]

# The error raised when no model answered and no fallback was declared, by the first reason.
_ERRORS: dict[str, type[ModelCallError]] = {
    "deadline": ModelDeadlineExceeded,
    "response_too_large": ResponseTooLarge,
}

_RESERVED_PARAMS = frozenset(
    {"model", "messages", "max_tokens", "stream", "stream_options", "tools", "system"}
)


async def wrap_model_call(
    model: str,
    messages: Sequence[dict[str, Any]] | None = None,
    *,
    prompt: str | None = None,
    tools: Sequence[ToolDefinition] | None = None,
    calls: ModelCalls | None = None,
    task: Task | None = None,
    deadline: datetime | None = None,
    tenant: str | None = None,
    max_tokens: int | None = None,
    stream: bool | None = None,
    fallback: Fallback | None = None,
    agent: str = "unknown",
    params: Mapping[str, Any] | None = None,
) -> ModelReply:
    """Call ``model`` (a name under ``models:``) with chat ``messages`` (or one ``prompt``).

    ``tools`` are offered to the model: when it asks for some, ``reply.tool_calls`` holds
    them (checked: offered names, JSON-object arguments) and ``reply.as_message()`` is the
    assistant message to append before the tool results. ``task`` supplies the deadline,
    the tenant and the id the records are filed under.
    Returns a ``ModelReply``: the text, which model answered, whether it is degraded, and
    one record per attempt (tokens, cost, latency split; the prompt only as a hash). Raises
    ``InputTooLong`` / ``ModelRequestRejected`` for requests no retry can fix, and
    ``ModelUnavailable`` / ``ModelDeadlineExceeded`` when nothing answered and no fallback
    was declared.
    """
    calls = calls or current_model_calls()
    if calls is None:
        raise RuntimeError("no ModelCalls: pass calls= or set one with use_model_calls()")
    chat = _messages(messages, prompt)
    extra = dict(params or {})
    if _RESERVED_PARAMS & extra.keys():
        raise InvalidRequest(f"params may not set {sorted(_RESERVED_PARAMS & extra.keys())}")
    loop = asyncio.get_running_loop()
    first = calls.runtime(model)
    if first.config.kind is not ModelKind.CHAT:
        raise InvalidRequest(f"model {model!r} is an embedding model: use embed()")
    ctx = CallContext(
        calls=calls,
        requested=model,
        messages=chat,
        digest=prompt_digest(chat, calls.prompt_hash_key),
        deadline=call_deadline(
            loop, first.config.timeouts.total_s, deadline or (task.deadline if task else None)
        ),
        loop=loop,
        max_tokens=max_tokens,
        stream=stream,
        tenant=tenant or (task.tenant if task else None),
        agent=agent,
        params=extra,
        tools=_tools(tools),
    )
    try:
        reply = await _answer(ctx, fallback)
    except ModelCallError as error:
        error.attempts = tuple(ctx.records)
        _note_usage(model, ctx, degraded=False)
        raise
    _note_usage(model, ctx, degraded=reply.degraded)
    return reply


def _messages(
    messages: Sequence[dict[str, Any]] | None, prompt: str | None
) -> list[dict[str, Any]]:
    if (messages is None) == (prompt is None):
        raise InvalidRequest("give either messages or prompt")
    return [{"role": "user", "content": prompt}] if prompt is not None else list(messages or ())


def _tools(tools: Sequence[ToolDefinition] | None) -> tuple[ToolDefinition, ...]:
    offered = tuple(tools or ())
    names = [tool.name for tool in offered]
    if len(set(names)) != len(names):
        raise InvalidRequest("tools: two tools share a name")
    return offered


def call_deadline(
    loop: asyncio.AbstractEventLoop, total_s: float, deadline: datetime | None
) -> float:
    """The call ends at the earlier of its total timeout and the task's deadline."""
    left = total_s
    if deadline is not None:
        left = min(left, (deadline - utcnow()).total_seconds())
    return loop.time() + left


async def _answer(ctx: CallContext, fallback: Fallback | None) -> ModelReply:
    config = ctx.calls.runtime(ctx.requested).config
    reasons: list[str] = []
    for name in (ctx.requested, *config.fallbacks):
        try:
            done = await ModelAttempts(ctx, ctx.calls.runtime(name)).run()
        except Refused as refused:
            reasons.append(f"{name}:{refused.reason}")
            continue
        return _reply(ctx, done, name, reasons)
    declared = fallback if fallback is not None else config.fallback
    first_reason = reasons[0].split(":", 1)[1]
    if declared is None:
        error_type = _ERRORS.get(first_reason, ModelUnavailable)
        raise error_type(f"no model answered ({', '.join(reasons)})", reason=first_reason)
    text = await _run_fallback(declared, FallbackInfo(ctx.requested, first_reason, ctx.messages))
    return ModelReply(
        text=text,
        model=None,
        requested_model=ctx.requested,
        prompt_sha256=ctx.digest,
        degraded=True,
        reason=first_reason,
        attempts=tuple(ctx.records),
    )


def _reply(ctx: CallContext, done: Completion, answered: str, reasons: list[str]) -> ModelReply:
    # An answer from further down the chain (a backup or a cheaper model) is degraded.
    degraded = answered != ctx.requested
    return ModelReply(
        text=done.text,
        tool_calls=done.tool_calls,
        finish_reason=finish_reason(done.finish_reason, has_tool_calls=bool(done.tool_calls)),
        model=answered,
        requested_model=ctx.requested,
        prompt_sha256=ctx.digest,
        degraded=degraded,
        reason=reasons[0].split(":", 1)[1] if degraded else None,
        attempts=tuple(ctx.records),
    )


async def _run_fallback(declared: Fallback | FallbackConfig, info: FallbackInfo) -> str:
    if isinstance(declared, FallbackConfig):
        return declared.text
    if isinstance(declared, str):
        return declared
    value = declared(info)
    if inspect.isawaitable(value):
        value = await value
    return str(value)


def _note_usage(model: str, ctx: CallContext, *, degraded: bool) -> None:
    ledger = current_usage()
    if ledger is not None:
        ledger.add(model, tuple(ctx.records), degraded)
