"""A delivery's audit events, as the worker builds them and the transport's one encoder
writes them: each parses to the event it stands for, whatever the strings hold."""

from __future__ import annotations

import time
from typing import Any

import orjson

from deepagents.contract import Result, Task
from deepagents.contract.codec import Envelope
from deepagents.contract.events import AuditEvent, audit_event
from deepagents.contract.result import ResultMetrics
from deepagents.contract.task import utcnow
from deepagents.transport.base import StreamRef
from deepagents.transport.keys import Keys
from deepagents.transport.outbox import encode_events, open_started
from deepagents.worker.encode import Encoder
from deepagents.worker.flight import InFlight

AWKWARD = 'quote " backslash \\ newline \n nul \x00 é 𝄞'


class _Agent:
    name = 'agent "quoted"'
    version = "1.0\\beta"


def _handler() -> Encoder:
    return Encoder(_Agent(), 'host-"1"')  # type: ignore[arg-type]  # the two fields read


def _flight(task: Task) -> InFlight:
    ref = StreamRef(Keys("t").shard("agent", 3), "p1")
    return InFlight(ref, "1-1", Envelope(task, attempt=2, enqueued_ms=0), 4)


SHARED = {
    "agent": 'agent "quoted"',
    "agent_version": "1.0\\beta",
    "tier": "p1",
    "shard": 3,
    "consumer": 'host-"1"',
    "attempt": 2,
}


def test_started_and_terminal_events_parse_to_their_fields() -> None:
    handler = _handler()
    task = Task(intent="x", payload={}, tenant=AWKWARD, traceparent=AWKWARD[:40])
    flight = _flight(task)
    flight.context = handler.context(flight.stream, flight.envelope)
    now = utcnow()
    started = handler.started_event(task.task_id, flight.context, now, 7)
    # the begin script appends the delivery count and the closing brace
    event = orjson.loads(open_started(started) + b"4}")
    shared = {**SHARED, "tenant": AWKWARD, "traceparent": AWKWARD[:40], "deliveries": 4}
    assert event == {
        "event_id": event["event_id"],
        "type": "started",
        "task_id": task.task_id,
        "ts": now.isoformat(),
        "queue_ms": 7,
        **shared,
    }
    result = orjson.dumps({"status": "success", "output": {"text": AWKWARD}})
    extra = [AuditEvent.of("model_call", task.task_id, model=AWKWARD)]
    model_call, terminal = orjson.loads(
        encode_events(handler.commit_events(flight, "succeeded", result, extra, now))
    )
    assert model_call == orjson.loads(orjson.dumps(extra[0].as_object()))
    assert terminal == {
        "event_id": terminal["event_id"],
        "type": "succeeded",
        "task_id": task.task_id,
        "ts": now.isoformat(),
        "result": {"status": "success", "output": {"text": AWKWARD}},
        **shared,
    }
    assert terminal["event_id"] != event["event_id"]


def test_a_task_without_tenant_or_trace_omits_them_and_rare_events_share_the_fields() -> None:
    handler = _handler()
    flight = _flight(Task(intent="x", payload={}))
    (terminal,) = orjson.loads(
        encode_events(handler.commit_events(flight, "failed", b"{}", [], utcnow()))
    )
    assert {k: terminal[k] for k in SHARED} == SHARED
    assert "tenant" not in terminal and "traceparent" not in terminal
    retried = handler.event("retried", flight, reason="r").as_object()
    assert {k: retried[k] for k in SHARED} == SHARED
    assert retried["deliveries"] == 4 and retried["reason"] == "r"


def test_the_committed_result_is_the_same_whether_the_agent_set_metrics_or_not() -> None:
    """Results without metrics of their own take a shortcut; it writes what the general
    path writes for the same values."""
    handler = _handler()
    flight = _flight(Task(intent="x", payload={}))
    now = utcnow()

    def committed(result: Result) -> dict[str, Any]:
        body: dict[str, Any] = orjson.loads(
            handler.result_json(flight, result, time.monotonic(), 12, now)
        )
        assert body["metrics"].pop("latency_ms") >= 0
        return body

    shortcut = committed(Result(output={"a": 1}))
    general = committed(Result(output={"a": 1}, metrics=ResultMetrics()))
    assert shortcut == general
    assert shortcut["metrics"] == {"queue_ms": 12, "tokens_used": 0, "cost_usd": 0.0, "attempts": 4}
    own = committed(Result(output=None, metrics=ResultMetrics(tokens_used=5, risk_score=0.5)))
    assert own["metrics"] == {
        "queue_ms": 12, "tokens_used": 5, "cost_usd": 0.0, "attempts": 4, "risk_score": 0.5
    }  # fmt: skip


def test_the_submitted_event_is_the_one_audit_event_builds() -> None:
    """The orchestrator builds each task's ``submitted`` event directly (it is per task):
    the same fields as ``audit_event``, the unset ones left out as there."""
    from deepagents.orchestrator.routing import Route
    from deepagents.orchestrator.submit import _submitted_events

    route = Route("echo", "p1", 3, StreamRef(Keys("t").shard("echo", 3), "p1"))
    for task in (
        Task(intent="echo", payload={"text": AWKWARD}),
        Task(intent="echo", payload={}, tenant="acme", traceparent="00-" + "1" * 32 + "-1-01"),
    ):
        (fast,) = orjson.loads(
            encode_events(_submitted_events(task, route, "2026-01-01T00:00:00+00:00"))
        )
        built = audit_event(
            "submitted",
            task.task_id,
            agent="echo",
            tier="p1",
            shard=3,
            intent=task.intent,
            tenant=task.tenant,
            traceparent=task.traceparent,
            payload=task.payload,
        )
        assert fast.pop("event_id") != built.pop("event_id")
        assert fast.pop("ts") == "2026-01-01T00:00:00+00:00" and built.pop("ts")
        assert fast == built
