"""Real processes against the real Redis: every metric after a real run (official parser,
promtool), ``status --watch --json``, one trace across two processes, and a kill -9 seen by
the exporter."""

from __future__ import annotations

import json
import os
import signal
import time
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import generate_latest
from redis.asyncio import Redis
from rich.console import Console

from deepagents import Task
from deepagents.cli.status import render_health
from deepagents.config import Settings, load_config
from deepagents.modelcall.simulator import SimulatorThread
from deepagents.orchestrator import Orchestrator
from deepagents.telemetry import Metrics, Telemetry, Tracing
from tests.support.procs import Procs
from tests.support.replies import as_bytes, entries
from tests.support.wait import eventually
from tests.telemetry.conftest import write_config
from tests.telemetry.support import (
    FLEET_METRICS,
    SUBMIT_METRICS,
    WORKER_METRICS,
    free_port,
    promtool_check_metrics,
    samples,
    try_scrape,
)

RESEARCH = {"topic": "rates", "text": "Rates rose. Bonds fell. Rates matter for bonds and banks."}


async def _scraped(port: int, *names: str) -> str:
    text = try_scrape(port)
    got = samples(text) if text else {}
    return text if all(n in got for n in names) else ""


async def test_real_run_exports_every_metric(
    procs: Procs, sim: SimulatorThread, client: Redis, settings: Settings, config_path: Path
) -> None:
    lab_port, research_port, fleet_port = free_port(), free_port(), free_port()
    sim_env = {"DEEPAGENTS_SIM_MODEL_URL": sim.url}
    procs.worker("tests.agents:LabAgent", "--metrics-port", str(lab_port))
    procs.worker("agents.research:ResearchAgent", "--metrics-port", str(research_port),
                 env=sim_env)  # fmt: skip
    procs.cli("exporter", "--port", str(fleet_port), "--interval", "0.2", "--addr", "127.0.0.1")
    for port in (lab_port, research_port):
        await eventually(partial(_scraped, port, "deepagents_agent_health_checks_total"),
                         what=f"worker /metrics on {port}")  # fmt: skip
    telemetry = Telemetry(metrics=Metrics(), tracing=Tracing(None))
    config = load_config(config_path)
    async with Orchestrator.from_client(
        client, config=config, settings=settings, telemetry=telemetry
    ) as orch:
        ok = await orch.submit_many(
            [Task(intent="lab", payload={"n": i, "urgent": i % 2 == 0}) for i in range(20)]
        )
        research = await orch.submit_many([Task(intent="research", payload=RESEARCH)] * 3)
        poison = await orch.submit(Task(intent="lab", payload={"fail": True}))
        for handle in [*ok, *research, poison]:
            await handle.result(timeout=60)
    for handle in research:
        assert (await handle.result(timeout=1)).metrics.tokens_used > 0  # the model answered
    status = procs.run("status", "--watch", "--json", "--iterations", "2", "--interval", "0.1",
                       "--metrics", f"http://127.0.0.1:{lab_port}/metrics")  # fmt: skip
    assert status.returncode == 0, status.stderr
    frames = [json.loads(line) for line in status.stdout.splitlines()]
    assert len(frames) == 2 and frames[-1]["health"]["lab"]["ratio"] == 1.0
    assert {"stream", "pending", "lag", "dead_letters"} <= frames[-1]["streams"][0].keys()
    assert set(frames[-1]["tiers"]) <= {"p0", "p1", "p2"}

    fleet = await eventually(lambda: _dead_letter_seen(fleet_port), what="exporter sample")
    texts = {
        "lab": try_scrape(lab_port),
        "research": try_scrape(research_port),
        "exporter": fleet,
        "orchestrator": generate_latest(telemetry.metrics.registry).decode(),  # type: ignore[union-attr]
    }
    names: set[str] = set()
    for where, text in texts.items():
        parsed = samples(text)  # the official parser accepts it
        assert parsed, where
        names |= set(parsed)
        promtool_check_metrics(text)
    missing = (WORKER_METRICS | FLEET_METRICS | SUBMIT_METRICS) - names
    assert not missing, missing
    lab = samples(texts["lab"])
    statuses = {lab_["status"] for lab_, v in lab["deepagents_tasks_completed_total"] if v}
    assert {"success", "retried", "dead_lettered"} <= statuses
    tokens = samples(texts["research"])["deepagents_model_call_tokens_total"]
    assert {lab_["kind"] for lab_, v in tokens if v > 0} == {"input", "output"}


async def _dead_letter_seen(port: int) -> str:
    text = try_scrape(port)
    got = samples(text) if text else {}
    dead = sum(v for lab, v in got.get("deepagents_dead_letters", []) if lab["agent"] == "lab")
    return text if dead >= 1 else ""


def _spans(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line]


async def test_one_trace_from_submit_to_model_call_across_two_processes(
    procs: Procs,
    sim: SimulatorThread,
    client: Redis,
    settings: Settings,
    config_path: Path,
    tmp_path: Path,
    prefix: str,
) -> None:
    span_file = tmp_path / "worker-spans.jsonl"
    worker = procs.worker("agents.research:ResearchAgent", env={
        "DEEPAGENTS_SIM_MODEL_URL": sim.url, "DEEPAGENTS_TRACE_FILE": str(span_file)})  # fmt: skip
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    telemetry = Telemetry(metrics=Metrics(), tracing=Tracing(provider))
    config = load_config(config_path)
    async with Orchestrator.from_client(
        client, config=config, settings=settings, telemetry=telemetry
    ) as orch:
        handle = await orch.submit(Task(intent="research", payload=RESEARCH))
        result = await handle.result(timeout=60)
    assert result.status.value == "success" and result.output["model"] == "research"
    (producer,) = memory.get_finished_spans()
    trace_id = format(producer.context.trace_id, "032x")
    producer_id = format(producer.context.span_id, "016x")
    assert producer.kind.name == "PRODUCER"

    def by_name() -> dict[str, dict[str, Any]]:
        return {s["name"].split(" ")[0]: s for s in _spans(span_file)}

    spans = await eventually(
        lambda: _ready(by_name(), {"process", "prepare_context", "execute", "post_process",
                                   "model_call"}), what="worker spans")  # fmt: skip
    assert {s["trace_id"] for s in spans.values()} == {trace_id}  # one trace
    assert {s["pid"] for s in spans.values()} == {worker.pid} != {os.getpid()}
    process = spans["process"]
    assert process["kind"] == "CONSUMER" and process["parent_id"] == producer_id
    for step in ("prepare_context", "execute", "post_process"):
        assert spans[step]["parent_id"] == process["span_id"], step
    model = spans["model_call"]
    assert model["parent_id"] == spans["execute"]["span_id"]
    assert model["kind"] == "CLIENT" and model["attributes"]["gen_ai.request.model"] == "research"
    # The audit events (and so the audit rows) carry the same trace.
    events = [e for shard in range(2)
              for _, f in await entries(client, f"{prefix}:{{research:{shard}}}:audit")
              for e in orjson.loads(f[b"events"])]  # fmt: skip
    assert {e["type"] for e in events} >= {"submitted", "started", "succeeded", "model_call"}
    traced = [e for e in events if e["type"] != "model_call"]
    assert all(trace_id in e["traceparent"] for e in traced)


async def _ready(spans: dict[str, dict[str, Any]], names: set[str]) -> dict[str, dict[str, Any]]:
    return spans if names <= spans.keys() else {}


@pytest.mark.parametrize("vis_ms", [3000])
async def test_kill_9_leaves_the_health_ratio_and_shows_dead_since(
    redis_url: str, prefix: str, client: Redis, tmp_path: Path, vis_ms: int
) -> None:
    config_path = write_config(tmp_path, vis=vis_ms)
    interval = 0.25
    procs = Procs({"DEEPAGENTS_REDIS_URL": redis_url, "DEEPAGENTS_PREFIX": prefix,
                   "DEEPAGENTS_CONFIG": str(config_path)})  # fmt: skip
    try:
        await _kill_scenario(procs, client, prefix, config_path, interval, vis_ms)
    finally:
        procs.close()


def _fleet(text: str) -> tuple[float, float] | None:
    """(health ratio, live instances) of the lab agent; None before the first sample."""
    got = samples(text)
    if "deepagents_agent_live_instances" not in got:
        return None
    ratio = next(v for lab, v in got["deepagents_agent_health_ratio"] if lab["agent"] == "lab")
    live = next(v for lab, v in got["deepagents_agent_live_instances"] if lab["agent"] == "lab")
    return ratio, live


async def _kill_scenario(
    procs: Procs, client: Redis, prefix: str, config_path: Path, interval: float, vis_ms: int
) -> None:
    port = free_port()
    # Small pools, both workers up before submitting: each holds some of the tasks.
    victim = procs.worker("tests.agents:LabAgent", "--consumer", "victim", "--concurrency", "p2=8")
    procs.worker("tests.agents:LabAgent", "--consumer", "survivor", "--concurrency", "p2=8")

    async def registered() -> bool:
        return await client.hlen(f"{prefix}:agent:lab:instances") == 2

    await eventually(registered, what="both workers registered")
    procs.cli("exporter", "--port", str(port), "--interval", str(interval),
              "--addr", "127.0.0.1")  # fmt: skip
    settings = Settings(prefix=prefix, outbox=False)
    config = load_config(config_path)
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        await orch.submit_many([Task(intent="lab", payload={"sleep": 60, "n": i})
                                for i in range(24)])  # fmt: skip

    async def both_running() -> bool:
        runs = await client.lrange(f"{prefix}:runs", 0, -1)
        pids = {int(as_bytes(x).decode().split("|")[1]) for x in runs}
        return victim.pid in pids and len(pids) == 2

    await eventually(both_running, what="both workers running tasks")

    async def steady() -> tuple[float, float] | None:
        sample = _fleet(try_scrape(port))
        return sample if sample == (1.0, 2.0) else None

    await eventually(steady, what="exporter sees two healthy live workers")
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    killed = time.monotonic()
    seen: list[tuple[float, float, float]] = []

    async def one_live() -> bool:
        sample = _fleet(try_scrape(port))
        if sample is not None:
            seen.append((time.monotonic() - killed, *sample))
        return bool(seen) and seen[-1][2] == 1.0

    await eventually(one_live, timeout=30, interval=0.02, what="one live instance")
    # Live = registry heartbeat within dead_after_ms: the dead one leaves the ratio, which
    # counts the healthy survivor only and never pages (tests/telemetry/rules/).
    assert all(ratio == 1.0 for _, ratio, _ in seen), seen
    frame = orjson.loads(procs.run("status", "--watch", "--json", "--iterations", "1").stdout)
    lab = frame["health"]["lab"]
    assert (lab["fresh"], lab["healthy"], lab["ratio"]) == (1, 1, 1.0)
    assert [d["instance"] for d in lab["dead"]] == ["victim"]
    table = Console(width=200, record=True)
    table.print(render_health(frame["health"]))
    assert "victim dead since" in table.export_text()
    print(f"kill -9: one live instance seen by the exporter after {seen[-1][0]:.2f} s")
