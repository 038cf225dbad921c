"""Units of deepagents.telemetry: the fast histogram, quantiles, logs, the model-call adapter,
and the checked-in alert rules and dashboard against what the code exports."""

from __future__ import annotations

import io
import json
import logging
import random
import re
import subprocess
from pathlib import Path

import orjson
import yaml
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from deepagents.modelcall.record import AttemptRecord
from deepagents.telemetry import Metrics, Telemetry, Tracing, catalogue, record_attempt
from deepagents.telemetry.histogram import TASK_BUCKETS, FastHistogram
from deepagents.telemetry.logs import JsonFormatter, configure_logging, current_task_id
from deepagents.telemetry.tracing import producer_span
from deepagents.telemetry.watch import quantile
from tests.telemetry.support import promtool, promtool_check_metrics, samples

REPO = Path(__file__).resolve().parents[2]
NAME = re.compile(r"\bdeepagents_[a-z0-9_]+")


def test_fast_histogram_matches_prometheus_client() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    fast = FastHistogram("x_seconds", "x", ("tier",), registry=ours).labels("p0")
    ref = Histogram("x_seconds", "x", ("tier",), buckets=TASK_BUCKETS, registry=theirs)
    values = [random.expovariate(5) for _ in range(2000)] + list(TASK_BUCKETS)
    for v in values:
        fast.observe(v)
        ref.labels("p0").observe(v)
    batched = CollectorRegistry()  # the worker observes a committed batch at once
    many = FastHistogram("x_seconds", "x", ("tier",), registry=batched).labels("p0")
    for at in range(0, len(values), 25):
        many.observe_many(values[at : at + 25])
    # Equal but for the order in which the sum was added up.
    in_batches = samples(generate_latest(batched).decode())
    for name, rows in samples(generate_latest(ours).decode()).items():
        assert [lab for lab, _ in in_batches[name]] == [lab for lab, _ in rows]
        for (_, got_v), (_, want_v) in zip(in_batches[name], rows, strict=True):
            assert abs(got_v - want_v) < 1e-9, name
    got = {(n, lab.get("le")): v for n, rows in samples(generate_latest(ours).decode()).items()
           for lab, v in rows}  # fmt: skip
    want = {(n, lab.get("le")): v for n, rows in samples(generate_latest(theirs).decode()).items()
            for lab, v in rows if not n.endswith("_created")}  # fmt: skip
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert abs(got[key] - value) < 1e-6, key


def test_quantile_interpolates_like_histogram_quantile() -> None:
    cumulative = [(0.1, 50.0), (0.2, 100.0), (float("inf"), 100.0)]
    assert quantile(0.5, cumulative) == 0.1
    assert abs((quantile(0.95, cumulative) or 0) - 0.19) < 1e-9
    assert quantile(0.95, [(0.1, 0.0), (float("inf"), 0.0)]) is None


def test_process_metrics_pass_promtool() -> None:
    m = Metrics()
    tier = m.tier("echo", "p0")
    tier.queue_wait.observe(0.002)
    tier.execution.observe(0.01)
    tier.latency.observe(0.012)
    tier.completed["success"].inc()
    m.health("echo", True)
    m.track_in_flight("echo", "p0", lambda: 3)
    text = generate_latest(m.registry).decode()
    assert samples(text)["deepagents_tasks_in_flight"] == [({"agent": "echo", "tier": "p0"}, 3.0)]
    promtool_check_metrics(text)


def _tracing() -> tuple[Tracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracing(provider), exporter


def test_model_call_adapter_records_metrics_and_a_child_span() -> None:
    tracing, exporter = _tracing()
    telemetry = Telemetry(metrics=Metrics(), tracing=tracing)
    ok = AttemptRecord("m1", 1, "ok", "sha256:x", tokens_in=10, tokens_out=5, total_ms=120.0,
                       cost_usd=0.002)  # fmt: skip
    retry = AttemptRecord("m1", 2, "transient", "sha256:x", total_ms=30.0, retries=1)
    refused = AttemptRecord("m1", 0, "circuit_open", "sha256:x")
    assert tracing.tracer is not None
    with tracing.tracer.start_as_current_span("execute") as parent:
        for record in (ok, retry, refused):
            record_attempt(telemetry, record, "research")
    assert telemetry.metrics is not None
    got = samples(generate_latest(telemetry.metrics.registry).decode())
    calls = {lab["outcome"]: v for lab, v in got["deepagents_model_calls_total"]}
    assert calls == {"ok": 1, "transient": 1, "circuit_open": 1}
    tokens = {lab["kind"]: v for lab, v in got["deepagents_model_call_tokens_total"]}
    assert tokens == {"input": 10, "output": 5}
    assert got["deepagents_model_call_cost_usd_total"] == [({"model": "m1", "agent": "research"},
                                                           0.002)]  # fmt: skip
    assert got["deepagents_model_call_retries_total"][0][1] == 1
    assert got["deepagents_model_circuit_state"] == [({"model": "m1"}, 2.0)]  # last: open
    spans = [s for s in exporter.get_finished_spans() if s.name.startswith("model_call")]
    assert len(spans) == 2  # a gate refusal reached no provider: no span
    for span in spans:
        assert span.parent is not None and span.parent.span_id == parent.get_span_context().span_id
        assert span.end_time is not None and span.start_time is not None
        assert span.end_time - span.start_time >= 30_000_000  # back-dated by its duration


def test_json_logs_carry_trace_and_task_ids_and_drop_unsafe_extras() -> None:
    tracing, _ = _tracing()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("test.telemetry.json")
    log.addHandler(handler)
    log.propagate = False
    assert tracing.tracer is not None
    token = current_task_id.set("task-1")
    try:
        with tracing.tracer.start_as_current_span("s") as span:
            log.warning("hello %s", "world", extra={"action": "x", "payload": {"prompt": "p"},
                                                    "api_key": "sk-secret"})  # fmt: skip
    finally:
        current_task_id.reset(token)
        log.removeHandler(handler)
    line = json.loads(stream.getvalue())
    assert line["msg"] == "hello world" and line["action"] == "x" and line["task_id"] == "task-1"
    assert line["trace_id"] == format(span.get_span_context().trace_id, "032x")
    assert "payload" not in line and "sk-secret" not in stream.getvalue()


def test_configure_logging_is_json_off_a_terminal() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure_logging("INFO", "auto", stream)
        logging.getLogger("x").info("plain")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    assert orjson.loads(stream.getvalue())["msg"] == "plain"


def test_alert_rules_pass_promtool_and_use_exported_metrics() -> None:
    path = REPO / "config/prometheus/alerts.yml"
    done = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    rules = [r for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]]
    names = {n for r in rules for n in NAME.findall(r["expr"])}
    assert names and names <= catalogue(), names - catalogue()
    wanted = {"Backlog", "OldestPending", "Health", "P95", "DeadLetters", "Budget", "Audit"}
    wanted |= {"StreamUnread", "TasksOverdue", "TasksShed"}  # placement gaps, overdue actions
    assert all(any(w in r["alert"] for r in rules) for w in wanted)


def test_dashboard_queries_use_exported_metrics() -> None:
    dash = json.loads((REPO / "config/grafana/deepagents.json").read_text())
    rows = [p["title"] for p in dash["panels"] if p["type"] == "row"]
    assert rows == ["Overview", "Agent matrix", "Models and cost"]
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [dash["templating"]["list"][1]["definition"]]
    names = {n for e in exprs for n in NAME.findall(e)}
    assert len(names) > 15
    assert names <= catalogue(), names - catalogue()


def test_no_tracer_means_no_spans_and_no_traceparent() -> None:
    off = Tracing(None)
    assert not off.recording
    # No test installs a global SDK provider: the host application's default records nothing.
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)
    assert not Tracing.from_global().recording
    host, _ = _tracing()  # a recording span around the call, as in a host application
    assert host.tracer is not None
    with host.tracer.start_as_current_span("host"):
        # No span, so the orchestrator writes no traceparent into the task (not even the
        # host's current one).
        assert producer_span(off, "echo", "p0", None) is None
        assert producer_span(Tracing.from_global(), "echo", "p0", None) is None


def test_exporter_is_chosen_by_settings(tmp_path: Path) -> None:
    from deepagents.config import Settings
    from deepagents.telemetry import setup_tracing

    assert not setup_tracing(Settings(), "t").recording  # no endpoint: no exporter
    assert not setup_tracing(Settings(tracing=False, trace_file=tmp_path / "x"), "t").recording
    otlp = setup_tracing(Settings(otlp_endpoint="http://127.0.0.1:9/v1/traces"), "t")
    assert otlp.recording
    otlp.shutdown()  # nothing was recorded: nothing is sent
