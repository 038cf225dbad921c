"""The research pipeline example (agents/research_pipeline.py) on real Redis, real worker
processes and the model simulator: three phases, parallel lanes and an approval (rejected
with feedback, then approved); and a worker killed with ``kill -9`` in the middle of the
execution phase, after which the task resumes and no completed step runs again."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from deepagents.config import Settings, load_config
from deepagents.contract import ResultStatus
from deepagents.errors import InvalidReply
from deepagents.modelcall.simulator import Action, SimSettings, SimulatorThread
from deepagents.orchestrator import Orchestrator
from tests.e2e.conftest import registered, worker_procs
from tests.support.pipeline import (
    AGENT,
    JOURNAL_ENV,
    journal,
    model_steps,
    outbox_events,
    recorded_steps,
    request,
    write_config,
)
from tests.support.procs import Procs
from tests.support.wait import eventually

LANES = 3
# Model calls answered before the simulator holds every later one. A task makes 1 + 2 x
# LANES calls before its draft, more than this: whichever task has a lane call among these
# is killed with lane calls still to make (in the middle of its execution phase), and with
# three tasks planning first, one has.
FAST_CALLS = 6
PHASES = {"plan": "preparation", "index": "preparation", "draft": "execution"}
PHASES |= {"revise": "execution", "summary": "finalization", "references": "finalization"}


@pytest.fixture
def sim() -> Iterator[SimulatorThread]:
    with SimulatorThread(SimSettings(latency_s=0.02, completion_tokens=30, seed=19)) as thread:
        yield thread


@pytest.fixture
def journal_path(tmp_path: Path) -> Path:
    return tmp_path / "model-calls.log"


@pytest.fixture
def pipeline_procs(
    redis_url: str, prefix: str, tmp_path: Path, sim: SimulatorThread, journal_path: Path,
    client: Redis,
) -> Iterator[Procs]:  # fmt: skip
    config = write_config(tmp_path, sim.url)
    p = worker_procs(redis_url, prefix, config, **{JOURNAL_ENV: str(journal_path)})
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
def orch_config(tmp_path: Path, sim: SimulatorThread, pipeline_procs: Procs) -> Path:
    return tmp_path / "pipeline.yaml"  # written by pipeline_procs


async def _asked(orch: Orchestrator, task_id: str, ask: str) -> dict[str, Any]:
    """Until the task waits on question ``ask``; its task hash."""

    async def parked() -> dict[str, Any] | None:
        info = await orch.lookup(task_id)
        waiting = info is not None and info.get("state") == "waiting" and info.get("ask") == ask
        return info if waiting else None

    info = await eventually(parked, timeout=60, what=f"task {task_id} asks question {ask}")
    assert info is not None
    return info


def _served(sim: SimulatorThread) -> int:
    """Model calls the simulator answered (or is answering)."""
    return sum(1 for entry in sim.log() if entry.status == 200)


async def test_the_pipeline_runs_three_phases_through_its_approval(
    client: Redis,
    prefix: str,
    pipeline_procs: Procs,
    orch_config: Path,
    sim: SimulatorThread,
    journal_path: Path,
) -> None:
    pipeline_procs.worker(AGENT)
    await registered(client, prefix, "research_pipeline", 1)
    config, settings = load_config(orch_config), Settings(prefix=prefix, outbox=True)
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        handle = await orch.submit(request(max_revisions=1))
        first = await _asked(orch, handle.task_id, "1")
        assert "futures market stress" in first["question"]
        assert [w.task_id for w in await orch.waiting("research_pipeline")] == [handle.task_id]
        feedback = {"approved": False, "feedback": "cite the margin source", "reviewer": "ana"}
        await orch.reply(handle.task_id, feedback)
        second = await _asked(orch, handle.task_id, "2")
        assert "(revision 1)" in second["question"]
        with pytest.raises(InvalidReply, match="approved"):
            await orch.reply(handle.task_id, {"approved": "yes"})
        await orch.reply(handle.task_id, {"approved": True, "reviewer": "ana"})
        result = await handle.result(timeout=60)
    assert result.status is ResultStatus.SUCCESS, result.error
    out = result.output
    assert out["approved"] and out["summary"] and len(out["plan"]) == LANES
    assert [f["question"] for f in out["findings"]] == out["plan"]
    assert {r["id"] for r in out["references"]} <= {0, 1, 2} and out["references"]
    assert [(r["approved"], r["feedback"]) for r in out["reviews"]] == [
        (False, "cite the margin source"),
        (True, ""),
    ]
    # Three deliveries (to each question, then to the end), and every model call once.
    expected = model_steps(LANES, revisions=1)
    calls = journal(journal_path)
    assert Counter(c.step for c in calls) == Counter(expected)
    assert out["model_calls"] == len(expected) == _served(sim)
    tokens = sum(c.tokens for c in calls)
    assert result.metrics.tokens_used == tokens > 0 and result.metrics.cost_usd > 0
    searches = {f"g0.{i}#search" for i in range(LANES)}
    assert await recorded_steps(client, prefix, handle.shard, handle.task_id) == {
        *expected, *searches, "index", "references",
    }  # fmt: skip
    events = await outbox_events(client, prefix, handle.task_id)
    steps = [e for e in events if e["type"] == "step_completed"]
    assert {e["step"] for e in steps} == {*expected, *searches, "index", "references"}
    for e in steps:  # each step with its phase, duration and, for a model call, its cost
        name = e["step"].split("#")[-1] if e["step"].startswith("g0.") else e["step"]
        assert e["phase"] == PHASES.get(name.split("#")[0], "execution"), e
        assert e["latency_ms"] >= 0
        assert (e.get("cost_usd") or 0) > 0 if e["step"] in expected else not e.get("cost_usd")
    assert sum(e.get("tokens_used") or 0 for e in steps) == tokens
    kinds = Counter(e["type"] for e in events)
    assert (kinds["waiting"], kinds["replied"], kinds["succeeded"]) == (2, 2, 1)
    # Each model call is in the trail, those of the deliveries that parked included.
    assert kinds["model_call"] == len(expected)


async def test_a_pipeline_killed_mid_execution_resumes_without_rerunning_a_step(
    client: Redis,
    prefix: str,
    pipeline_procs: Procs,
    orch_config: Path,
    sim: SimulatorThread,
    journal_path: Path,
) -> None:
    victim = pipeline_procs.worker(AGENT)
    await registered(client, prefix, "research_pipeline", 1)
    config, settings = load_config(orch_config), Settings(prefix=prefix, outbox=True)
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        sim.call(_hold_after(sim, FAST_CALLS))
        handles = await orch.submit_many([request(max_revisions=0) for _ in range(3)])
        await _quiet(client, prefix, sim, journal_path, handles, FAST_CALLS)
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        hung = sim.call(lambda: sim.sim.state.inflight)  # the dead worker's calls, held
        before = journal(journal_path)
        sim.call(lambda: sim.sim.configure(latency_s=0.02))
        pipeline_procs.worker(AGENT)
        results = await _approve_all(orch, handles)
    assert all(r.status is ResultStatus.SUCCESS and r.output["approved"] for r in results)
    calls = journal(journal_path)
    per_task = Counter((c.task_id, c.step) for c in calls)
    assert set(per_task.values()) == {1}, [k for k, n in per_task.items() if n > 1]
    for h in handles:  # every model step of every task ran once, on one worker or the other
        assert {s for t, s in per_task if t == h.task_id} == model_steps(LANES), h.task_id
    # Killed in the middle of its execution phase, a task finished it on the new worker.
    killed = {(c.task_id, c.step) for c in before}
    split = [
        h.task_id
        for h in handles
        if any(t == h.task_id and s.startswith("g0.") for t, s in killed)
        and any(c.task_id == h.task_id and c.step.startswith("g0.") for c in calls[len(before) :])
    ]
    assert split, "no task was killed mid-execution"
    # The only model calls made twice are the ones the killed worker had in flight.
    assert _served(sim) == len(calls) + hung
    for h, r in zip(handles, results, strict=True):
        assert r.metrics.tokens_used == sum(c.tokens for c in calls if c.task_id == h.task_id)
    events = [e for h in handles for e in await outbox_events(client, prefix, h.task_id)]
    assert any(e["type"] == "resumed" and e["steps"] > 0 for e in events)
    for h, r in zip(handles, results, strict=True):  # latency from the first start on
        starts = [
            datetime.fromisoformat(e["ts"])
            for e in events
            if e["task_id"] == h.task_id and e["type"] == "started"
        ]
        assert len(starts) >= 2 and r.metrics.latency_ms >= (max(starts) - min(starts)) / _MS


_MS = timedelta(milliseconds=1)


def _hold_after(sim: SimulatorThread, fast: int) -> Callable[[], None]:
    """On the simulator's loop: the next ``fast`` calls are answered, every later one hangs."""

    def hold() -> None:
        sim.sim.push(*(Action(latency_s=0.02) for _ in range(fast)))
        sim.sim.configure(latency_s=600.0)

    return hold


async def _quiet(
    client: Redis,
    prefix: str,
    sim: SimulatorThread,
    journal_path: Path,
    handles: list[Any],
    held_from: int,
) -> None:
    """Until every call made before the hold has returned, been journaled and recorded, and
    the ones in flight are all held (at least one): no model call can complete before the
    kill."""

    async def settled() -> bool:
        inflight, arrived = sim.call(lambda: (sim.sim.state.inflight, len(sim.sim.state.log)))
        calls = journal(journal_path)
        recorded = 0
        for h in handles:
            steps = await recorded_steps(client, prefix, h.shard, h.task_id)
            recorded += len(steps & model_steps(LANES))
        done = arrived - inflight
        return inflight == arrived - held_from > 0 and done == len(calls) == recorded

    await eventually(settled, timeout=60, what="every returned call recorded")


async def _approve_all(orch: Orchestrator, handles: list[Any]) -> list[Any]:
    """Approve each task when it asks, as a reviewer would; their results."""

    async def review(handle: Any) -> Any:
        await _asked(orch, handle.task_id, "1")
        await orch.reply(handle.task_id, {"approved": True, "reviewer": "test"})
        return await handle.result(timeout=60)

    return list(await asyncio.gather(*(review(h) for h in handles)))
