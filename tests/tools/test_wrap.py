"""``@tool`` and ``wrap_tool_call`` on Python tools: arguments checked before the call,
retries only when the policy says it is safe, the per-tool cap and the task's deadline,
the fleet's breaker in a real Redis, and the audit event, metrics and span of each call."""

from __future__ import annotations

import asyncio
import math
from datetime import timedelta
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import generate_latest
from pydantic import BaseModel
from redis.asyncio import Redis

from deepagents.config.models import BreakerConfig
from deepagents.contract.task import Task, utcnow
from deepagents.contract.toolcalls import ToolCall, ToolResult
from deepagents.telemetry.metrics import Metrics
from deepagents.telemetry.tracing import Tracing
from deepagents.tools import (
    ToolCalls,
    ToolCircuitOpen,
    ToolDeadlineExceeded,
    ToolPolicy,
    ToolProtocolError,
    ToolUnavailable,
    arguments_digest,
    start_tool_ledger,
    tool,
    wrap_tool_call,
)
from deepagents.tools.definition import checked_schema
from tests.telemetry.support import samples


def _call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall("call-1", name, arguments)


class Forecast(BaseModel):
    city: str
    days: int = 1


async def test_a_signature_becomes_the_schema_and_arguments_are_checked_before_the_call() -> None:
    calls: list[tuple[int, int]] = []

    @tool
    def add(a: int, b: int = 2) -> int:
        """Add two integers."""
        calls.append((a, b))
        return a + b

    assert add.definition.description == "Add two integers."
    assert add.definition.parameters["required"] == ["a"]
    assert await wrap_tool_call(add, _call("add", a=40)) == ToolResult("call-1", "add", 42)
    for bad in ({"a": "x"}, {"b": 1}, {"a": 1, "c": [[[]]] * 3, "d": math.inf}):
        result = await wrap_tool_call(add, ToolCall("call-1", "add", bad))
        assert result.is_error and result.content["error"] == "tool_invalid_arguments", bad
    deep: dict[str, Any] = {}
    for _ in range(40):
        deep = {"x": deep}
    result = await wrap_tool_call(add, _call("add", a=1, deep=deep))
    assert result.content["error"] == "tool_invalid_arguments"
    assert "nested deeper" in result.content["message"]
    assert calls == [(40, 2)]  # none of the bad calls reached the function


async def test_pydantic_and_json_schema_inputs() -> None:
    @tool(input=Forecast, read_only=True)
    async def forecast(args: Forecast) -> dict[str, Any]:
        """The weather."""
        return {"city": args.city, "days": args.days}

    @tool(input={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})
    def search(q: str) -> list[str]:
        return [q.upper()]

    assert forecast.definition.parameters["properties"]["city"]["type"] == "string"
    assert forecast.policy.read_only and forecast.policy.attempts() == 3
    result = await wrap_tool_call(forecast, _call("forecast", city="Oslo"))
    assert result.content == {"city": "Oslo", "days": 1}
    assert (await wrap_tool_call(search, _call("search", q="a"))).content == ["A"]
    missing = await wrap_tool_call(search, _call("search"))
    assert missing.content["error"] == "tool_invalid_arguments"
    assert "'q' is a required property" in missing.content["message"]


def _flaky(fails: int, *, idempotent: bool) -> tuple[Any, list[int]]:
    runs: list[int] = []

    @tool(idempotent=idempotent, policy=ToolPolicy(idempotent=idempotent, backoff_s=0.001))
    async def flaky() -> str:
        runs.append(len(runs) + 1)
        if len(runs) <= fails:
            raise ToolUnavailable("the service is away")
        return "done"

    return flaky, runs


async def test_retries_only_for_idempotent_or_read_only_tools() -> None:
    flaky, runs = _flaky(2, idempotent=True)
    assert (await wrap_tool_call(flaky, _call("flaky"))).content == "done"
    assert runs == [1, 2, 3]

    once, runs = _flaky(2, idempotent=False)
    result = await wrap_tool_call(once, _call("flaky"))
    assert result.is_error and result.content["error"] == "tool_unavailable"
    assert runs == [1]


async def test_a_tool_s_own_error_is_a_result_and_not_retried() -> None:
    runs: list[int] = []

    @tool(read_only=True)
    def lookup(key: str) -> str:
        runs.append(1)
        raise KeyError(key)

    result = await wrap_tool_call(lookup, _call("lookup", key="k"))
    assert result.is_error and result.content == {
        "error": "tool_error",
        "message": "lookup: KeyError: 'k'",
    }
    assert runs == [1]


async def test_a_result_that_is_not_bounded_json_is_a_protocol_error() -> None:
    @tool
    def nan() -> float:
        return math.nan

    result = await wrap_tool_call(nan, _call("nan"))
    assert result.content["error"] == "tool_protocol_error"


async def test_the_per_tool_cap_and_the_task_deadline() -> None:
    never = asyncio.Event()

    @tool(timeout_s=0.05, retries=0, idempotent=True)
    async def hang() -> None:
        await never.wait()

    result = await wrap_tool_call(hang, _call("hang"))
    assert result.content["error"] == "tool_timeout"

    @tool(timeout_s=60)
    async def hang_long() -> None:
        await never.wait()

    task = Task(intent="x", payload={}, deadline=utcnow() + timedelta(milliseconds=50))
    with pytest.raises(ToolDeadlineExceeded):
        await wrap_tool_call(hang_long, _call("hang_long"), task=task)


async def test_the_fleet_breaker_opens_for_every_worker(client: Redis, prefix: str) -> None:
    runs: list[int] = []
    breaker = BreakerConfig(min_calls=2, failure_rate=0.5, cooldown_s=60, state_cache_s=0)

    @tool(policy=ToolPolicy(breaker=breaker, retries=0))
    async def down() -> None:
        runs.append(1)
        raise ToolUnavailable("connection refused")

    one, two = ToolCalls(client, prefix=prefix), ToolCalls(client, prefix=prefix)
    for _ in range(2):
        result = await wrap_tool_call(down, _call("down"), calls=one)
        assert result.content["error"] == "tool_unavailable"
    assert runs == [1, 1]
    for calls in (one, two):  # another worker's ToolCalls sees the same open circuit
        with pytest.raises(ToolCircuitOpen) as refused:
            await wrap_tool_call(down, _call("down"), calls=calls)
        assert refused.value.code == "tool_unavailable" and refused.value.retry_after_s > 0
        assert not refused.value.counted
    assert runs == [1, 1]
    await one.aclose()
    await two.aclose()


async def test_audit_event_metrics_and_span_carry_no_raw_values() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    metrics = Metrics()
    calls = ToolCalls(None, metrics=metrics.tool, tracing=Tracing(provider))

    @tool
    def login(user: str, password: str) -> str:
        return f"welcome {user}"

    ledger = start_tool_ledger()
    arguments = {"user": "ann", "password": "hunter2-secret"}
    await wrap_tool_call(login, ToolCall("c9", "login", arguments), agent="a1", calls=calls)
    await wrap_tool_call(login, ToolCall("c10", "login", {}), agent="a1", calls=calls)
    events = [e.as_object() for e in ledger.audit_events("task-1")]
    assert [e["type"] for e in events] == ["tool_call", "tool_call"]
    first = events[0]
    assert first["tool"] == "login" and first["server"] == "python"
    assert first["outcome"] == "ok" and "error_code" not in first
    assert first["arguments_sha256"] == arguments_digest(arguments)
    assert events[1]["error_code"] == "tool_invalid_arguments"
    dumped = orjson.dumps(events).decode()
    assert "hunter2" not in dumped and "welcome" not in dumped and "ann" not in dumped

    found = samples(generate_latest(metrics.registry).decode())
    assert sorted(found["deepagents_tool_calls_total"], key=lambda s: s[0]["outcome"]) == [
        ({"agent": "a1", "tool": "login", "outcome": "ok"}, 1.0),
        ({"agent": "a1", "tool": "login", "outcome": "tool_invalid_arguments"}, 1.0),
    ]
    counts = [v for labels, v in found["deepagents_tool_call_seconds_count"]]
    assert counts == [2.0]
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["execute_tool login", "execute_tool login"]
    attributes = dict(spans[0].attributes or {})
    assert attributes["gen_ai.tool.name"] == "login"
    assert attributes["gen_ai.tool.call.id"] == "c9"
    assert attributes["deepagents.tool.outcome"] == "ok"
    assert "hunter2" not in orjson.dumps(attributes).decode()


def test_an_outside_schema_is_checked_and_its_patterns_are_not_run() -> None:
    schema = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "pattern": "^(a+)+$"},
            "when": {"type": "string", "format": "date"},
        },
        "patternProperties": {"^x": {"type": "string"}},
    }
    safe = checked_schema(schema, "s/t")
    assert safe == {
        "type": "object",
        "properties": {"pattern": {"type": "string"}, "when": {"type": "string"}},
    }
    bad_schemas: list[Any] = [
        {"type": "array"},
        {"type": "object", "properties": {"x": {"type": 12}}},
        [],
    ]
    for bad in bad_schemas:
        with pytest.raises(ToolProtocolError):
            checked_schema(bad, "s/t")
