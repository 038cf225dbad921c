"""The research pipeline's audit trail (issue 19): a reviewer reads in ``deepagents audit
show`` which step ran in which phase, for how long and at what cost, with the question, the
reply and the resume between them. A real worker process runs the example agent over the
model simulator; the question is answered with ``deepagents reply``; the real audit writer
fills PostgreSQL; the trail is read with the CLI."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from deepagents.config import Settings, load_config
from deepagents.contract import ResultStatus
from deepagents.modelcall.simulator import SimSettings, SimulatorThread
from deepagents.orchestrator import Orchestrator
from deepagents.store.audit.migrate import migrate
from tests.audit.support import drained, running_writer
from tests.cli.support import table_rows
from tests.e2e.conftest import registered, worker_procs
from tests.support.pipeline import request, write_config
from tests.support.procs import Procs
from tests.support.wait import eventually

AGENT = "agents.research_pipeline:ResearchPipelineAgent"
LANES = 3
MODEL_STEPS = {"plan", "draft", "summary"} | {
    f"g0.{i}#{name}" for i in range(LANES) for name in ("analyse", "condense")
}
PHASE_OF = {"plan": "preparation", "index": "preparation", "draft": "execution"}
PHASE_OF |= {"summary": "finalization", "references": "finalization"}
LANE_STEPS = ("search", "analyse", "condense")
PHASE_OF |= {f"g0.{i}#{n}": "execution" for i in range(LANES) for n in LANE_STEPS}


@pytest.fixture
def sim() -> Iterator[SimulatorThread]:
    with SimulatorThread(SimSettings(latency_s=0.02, completion_tokens=30, seed=19)) as thread:
        yield thread


@pytest.fixture
def config_path(tmp_path: Path, sim: SimulatorThread) -> Path:
    return write_config(tmp_path, sim.url, agent=AGENT)


@pytest.fixture
def cli(
    redis_url: str, prefix: str, config_path: Path, pg_url: str, schema: str, client: Redis
) -> Iterator[Procs]:
    env = {"DEEPAGENTS_DATABASE_URL": pg_url, "DEEPAGENTS_AUDIT_SCHEMA": schema}
    p = worker_procs(redis_url, prefix, config_path, **env)
    try:
        yield p
    finally:
        p.close()


def _ok(done: Any) -> str:
    assert done.returncode == 0, done.stderr[-3000:]
    return str(done.stdout)


async def test_audit_show_lists_each_step_with_its_phase_duration_and_cost(
    client: Redis, prefix: str, config_path: Path, cli: Procs, pg_url: str, schema: str,
    audit_settings: Settings,
) -> None:  # fmt: skip
    await migrate(pg_url, schema)
    config = load_config(config_path)
    cli.worker(AGENT)
    await registered(client, prefix, "research_pipeline", 1)
    async with (
        running_writer(client, audit_settings, config) as writer,
        Orchestrator.from_client(client, config=config, settings=audit_settings) as orch,
    ):
        handle = await orch.submit(request(lanes=LANES, max_revisions=0))

        async def asked() -> list[dict[str, Any]]:  # the CLI runs beside the writer's loop
            done = await asyncio.to_thread(cli.run, "tasks", "waiting", "--json")
            rows: list[dict[str, Any]] = orjson.loads(_ok(done))
            return rows

        (waiting,) = await eventually(asked, timeout=60, what="the pipeline asks for approval")
        assert waiting["task_id"] == handle.task_id and waiting["agent"] == "research_pipeline"
        answer = orjson.dumps({"approved": True, "reviewer": "cli"}).decode()
        replied = await asyncio.to_thread(cli.run, "reply", handle.task_id, "--answer", answer)
        assert "queued again" in _ok(replied)
        result = await handle.result(timeout=60)
        assert result.status is ResultStatus.SUCCESS and result.output["approved"]
        await drained(writer)
    events = orjson.loads(_ok(cli.run("audit", "show", handle.task_id, "--json")))
    kinds = [e["type"] for e in events]
    order = [kinds.index(k) for k in ("waiting", "replied", "resumed", "succeeded")]
    assert order == sorted(order), kinds
    assert kinds.count("model_call") == len(MODEL_STEPS)  # those before the question too
    steps = [e for e in events if e["type"] == "step_completed"]
    assert sorted(e["detail"]["step"] for e in steps) == sorted(PHASE_OF)  # each step once
    for e in steps:
        assert e["detail"]["phase"] == PHASE_OF[e["detail"]["step"]], e
        assert e["latency_ms"] is not None and e["latency_ms"] >= 0, e
        metered = e["detail"]["step"] in MODEL_STEPS
        assert (e["cost_usd"] or 0) > 0 and e["tokens_used"] > 0 if metered else not e["cost_usd"]
    # Each model call is in time order between the steps that made it: within a metered
    # step's run (from its start, its end less its duration, to its end; parallel lanes'
    # steps overlap), listed before that step's end, and each metered step holds a call.
    calls = [e for e in events if e["type"] == "model_call"]
    paid = [e for e in steps if e["detail"]["step"] in MODEL_STEPS]
    slack = timedelta(milliseconds=5)  # the wall clock against the monotonic one

    def within(call: dict[str, Any], step: dict[str, Any]) -> bool:
        end = datetime.fromisoformat(step["ts"])
        start = end - timedelta(milliseconds=step["latency_ms"]) - slack
        at = datetime.fromisoformat(call["ts"])
        return start <= at <= end and events.index(call) < events.index(step)

    assert all(any(within(c, e) for e in paid) for c in calls), calls
    assert all(any(within(c, e) for c in calls) for e in paid), paid
    (done,) = [e for e in events if e["type"] == "succeeded"]
    assert (
        sum(e["tokens_used"] or 0 for e in steps)
        == done["tokens_used"]
        == (result.metrics.tokens_used)
    )
    # The table a reviewer reads: one row per step, "phase · step", its ms, tokens and cost.
    table = _ok(cli.run("audit", "show", handle.task_id))
    rows = {c[6].split(" (")[0]: c for c in table_rows(table, "") if c[1] == "step_completed"}
    assert set(rows) == {f"{phase} · {step}" for step, phase in PHASE_OF.items()}, table
    for step, phase in PHASE_OF.items():
        cells = rows[f"{phase} · {step}"]
        assert float(cells[7]) >= 0, cells
        assert (float(cells[9]) > 0) if step in MODEL_STEPS else cells[9] == "", cells
