"""``wrap_tool_call``: one tool call, bounded, retried only when safe, behind the fleet's
breaker, audited, traced, counted, and durable inside a task with steps.

Inside a task with steps (the worker's ``TaskContext``) the call is a step named
``tool:<server>/<name>``: a later delivery of the task returns the recorded result without
calling again, and the tool receives the step key as its idempotency key. Only the call in
flight when a worker died runs again, with the same key. Tool calls made in parallel keep
their step ids stable when started in a fixed order (``asyncio.gather`` over the calls in
the model's order, or ``ctx.gather``).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from deepagents.contract.context import TaskContext, active_context
from deepagents.contract.task import Task, utcnow
from deepagents.contract.toolcalls import ToolCall, ToolResult
from deepagents.errors import StepError
from deepagents.tools.bounds import OutOfBounds, check_json
from deepagents.tools.definition import Tool
from deepagents.tools.errors import (
    ToolCallError,
    ToolCircuitOpen,
    ToolDeadlineExceeded,
    ToolFailed,
    ToolProtocolError,
    ToolTimeout,
    ToolUnavailable,
)
from deepagents.tools.ledger import current_tool_ledger
from deepagents.tools.runtime import ToolCalls, current_tool_calls

OK = "ok"
# Failures a new attempt may mend (the server was away, or slow); a tool's own "no", its
# refusal of the arguments or a garbled answer would come back the same.
_RETRIED = (ToolUnavailable, ToolTimeout)
_NO_RUNTIME = ToolCalls()


def arguments_digest(arguments: Mapping[str, Any], key: bytes | None = None) -> str:
    """SHA-256 (HMAC with ``key``) of the arguments as canonical JSON: what the audit and
    loop detection compare, never the values."""
    body = orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS)
    if key:
        return hmac.new(key, body, hashlib.sha256).hexdigest()
    return hashlib.sha256(body).hexdigest()


@dataclass
class _Call:
    tool: Tool
    call: ToolCall
    calls: ToolCalls
    agent: str
    task_id: str | None
    deadline: float | None  # loop time
    attempts: int = 0


async def wrap_tool_call(
    tool: Tool,
    call: ToolCall,
    *,
    task: Task | None = None,
    agent: str = "unknown",
    calls: ToolCalls | None = None,
    deadline: datetime | None = None,
) -> ToolResult:
    """Call ``tool`` as ``call`` asks; the tool's own failure, bad arguments, a garbled or
    missing server come back as a ``ToolResult`` with ``is_error`` (content ``{"error":
    <code>, "message": ...}``). Raises ``ToolCircuitOpen`` (the fleet's breaker is open: the
    task waits) and ``ToolDeadlineExceeded`` (the task's deadline passed)."""
    ctx = active_context()
    if ctx is not None and not _in_step(ctx):
        # No await before ctx.step: calls started in order get their step ids in order.
        recorded = await ctx.step(
            _step_name(tool), _stepped, tool, call, task, agent, calls, deadline
        )
        return ToolResult(call.id, tool.name, recorded["content"], bool(recorded["is_error"]))
    key = ctx.step_key if ctx is not None else None
    return await _run(tool, call, task, agent, calls, key, deadline)


def _in_step(ctx: TaskContext) -> bool:
    try:
        ctx.step_key  # noqa: B018 -- raises outside a step's fn
    except StepError:
        return False
    return True


def _step_name(tool: Tool) -> str:
    return f"tool:{tool.server}/{tool.name}".replace("#", "_")[:200]


async def _stepped(
    tool: Tool,
    call: ToolCall,
    task: Task | None,
    agent: str,
    calls: ToolCalls | None,
    deadline: datetime | None,
) -> dict[str, Any]:
    ctx = active_context()
    key = ctx.step_key if ctx is not None else None
    result = await _run(tool, call, task, agent, calls, key, deadline)
    return {"content": result.content, "is_error": result.is_error}


async def _run(
    tool: Tool,
    call: ToolCall,
    task: Task | None,
    agent: str,
    calls: ToolCalls | None,
    key: str | None,
    deadline: datetime | None,
) -> ToolResult:
    runtime = calls or current_tool_calls() or _NO_RUNTIME
    loop = asyncio.get_running_loop()
    ends = deadline or (task.deadline if task is not None else None)
    ctx = active_context()
    task_id = task.task_id if task is not None else (ctx.task_id if ctx is not None else None)
    state = _Call(
        tool,
        call,
        runtime,
        agent,
        task_id,
        None if ends is None else loop.time() + (ends - utcnow()).total_seconds(),
    )
    started = time.perf_counter()
    tracer = runtime.tracing.tracer if runtime.tracing is not None else None
    if tracer is None:
        return await _observed(state, key, started, None)
    with tracer.start_as_current_span(
        f"execute_tool {tool.name}",
        kind=SpanKind.CLIENT if tool.server != "python" else SpanKind.INTERNAL,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool.name,
            "gen_ai.tool.call.id": call.id,
            "deepagents.tool.server": tool.server,
            "deepagents.agent": agent,
        },
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        return await _observed(state, key, started, span)


async def _observed(
    state: _Call, key: str | None, started: float, span: trace.Span | None
) -> ToolResult:
    outcome = OK
    try:
        result = await _attempts(state, key)
        if result.is_error:
            outcome = str(result.content.get("error", "tool_error"))
        return result
    except ToolCallError as error:
        outcome = error.code.value
        raise
    except asyncio.CancelledError:
        outcome = "cancelled"
        raise
    finally:
        _record(state, outcome, time.perf_counter() - started, span)


def _record(state: _Call, outcome: str, elapsed: float, span: trace.Span | None) -> None:
    runtime, tool = state.calls, state.tool
    if runtime.metrics is not None:
        runtime.metrics.calls.labels(state.agent, tool.name, outcome).inc()
        runtime.metrics.duration.labels(state.agent, tool.name).observe(elapsed)
    if span is not None:
        span.set_attribute("deepagents.tool.outcome", outcome)
        span.set_attribute("deepagents.tool.attempts", state.attempts)
        if outcome != OK:
            span.set_status(trace.Status(trace.StatusCode.ERROR, outcome))
    ledger = current_tool_ledger()
    if ledger is not None:
        arguments = state.call.arguments
        digest = _digest(arguments, runtime.hash_key)
        ledger.add(
            tool=tool.name,
            server=tool.server,
            call_id=state.call.id[:200],
            arguments_sha256=digest,
            latency_ms=round(elapsed * 1000, 3),  # the audit table's latency column
            outcome=outcome,
            error_code=None if outcome == OK else outcome,
            attempts=state.attempts,
        )


def _digest(arguments: Any, key: bytes | None) -> str | None:
    """The arguments' hash; None for what is no JSON object (refused before the call)."""
    if not isinstance(arguments, Mapping):
        return None
    try:
        return arguments_digest(arguments, key)
    except (TypeError, orjson.JSONEncodeError):
        return None


async def _attempts(state: _Call, key: str | None) -> ToolResult:
    tool, call = state.tool, state.call
    try:
        arguments = tool.check_arguments(call.arguments)
    except ToolCallError as error:
        return _error_result(call, tool, error)
    breaker = state.calls.breaker(tool)
    policy = tool.policy
    last: ToolCallError | None = None
    for attempt in range(1, policy.attempts() + 1):
        state.attempts = attempt
        cap, by_deadline = _time_left(state)
        permit = await breaker.allow(cap) if breaker is not None else None
        if permit is not None and not permit.allowed:
            raise ToolCircuitOpen(
                f"{tool.server}/{tool.name}: the circuit is open for the fleet",
                retry_after_s=permit.retry_in_s,
            )
        failed: ToolCallError | None = None
        try:
            content = await _once(tool, arguments, key, cap, by_deadline)
        except ToolCallError as caught:
            failed = caught
        if breaker is not None and permit is not None:
            await breaker.record(permit, failed)
        if failed is None:
            return ToolResult(call.id, tool.name, content)
        if isinstance(failed, ToolDeadlineExceeded):
            raise failed
        last = failed
        if not isinstance(failed, _RETRIED) or attempt == policy.attempts():
            break
        await _pause(state, policy.backoff(attempt))
    assert last is not None
    return _error_result(call, tool, last)


def _time_left(state: _Call) -> tuple[float, bool]:
    """The cap of the next attempt, and whether the task's deadline sets it."""
    cap = state.tool.policy.timeout_s
    if state.deadline is None:
        return cap, False
    left = state.deadline - asyncio.get_running_loop().time()
    if left <= 0:
        raise ToolDeadlineExceeded(f"{state.tool.name}: the task's deadline passed")
    return (left, True) if left < cap else (cap, False)


async def _pause(state: _Call, seconds: float) -> None:
    if state.deadline is not None:
        left = state.deadline - asyncio.get_running_loop().time()
        if left <= seconds:
            raise ToolDeadlineExceeded(f"{state.tool.name}: no time left to retry")
    await asyncio.sleep(seconds)


async def _once(
    tool: Tool, arguments: dict[str, Any], key: str | None, cap: float, by_deadline: bool
) -> Any:
    try:
        async with asyncio.timeout(cap):
            value = await tool.invoke(arguments, idempotency_key=key)
    except TimeoutError:
        if by_deadline:
            raise ToolDeadlineExceeded(f"{tool.name}: the task's deadline passed") from None
        raise ToolTimeout(f"{tool.name}: no answer within {cap:g} s") from None
    except ToolCallError:
        raise
    except Exception as error:  # a Tool subclass that let its own error out
        raise ToolFailed(f"{tool.name}: {type(error).__name__}: {error}"[:2000]) from error
    try:
        check_json(value, f"{tool.name}'s result")
    except OutOfBounds as error:
        raise ToolProtocolError(str(error)) from None
    return value


def _error_result(call: ToolCall, tool: Tool, error: ToolCallError) -> ToolResult:
    return ToolResult(
        call.id,
        tool.name,
        {"error": error.code.value, "message": str(error)[:2000]},
        is_error=True,
    )
