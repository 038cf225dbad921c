"""Durable steps against real worker processes killed with ``kill -9`` (issue 19's must-show):
200 tasks of a 3-phase, 20-step agent; five times, at random points, a busy worker is killed
and restarted. Every task ends with one result, and every recorded step's side effect
happened once — but for the in-flight rule: a step whose fn finished on the killed worker
but whose record had not landed runs again, at most one such step per lane of a task per
kill. A live worker whose lease ran out (starved past the 1 s visibility timeout on a slow
machine) is, to the protocol, as good as dead: its in-flight steps may run again too, and
it says so in its log (``lease_lost``, ``step_refused``, ``commit_refused``)."""

from __future__ import annotations

import asyncio
import json
import random
import signal
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis

from deepagents.config import Settings, load_config
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from tests.e2e.conftest import assert_committed_once, committed_events, registered, worker_procs
from tests.e2e.steps_support import write_config
from tests.steps_agents import LANES, STEPS
from tests.support.procs import Procs
from tests.support.replies import as_bytes
from tests.support.wait import eventually

TASKS, KILLS, SHARDS = 200, 5, 2
AGENT = "tests.steps_agents:PipelineAgent"


@pytest.fixture
def steps_config(tmp_path: Path) -> Path:
    return write_config(tmp_path, concurrency=10, max_deliveries=10)


@pytest.fixture
def steps_procs(redis_url: str, prefix: str, steps_config: Path, client: Redis) -> Iterator[Procs]:
    p = worker_procs(redis_url, prefix, steps_config)
    try:
        yield p
    finally:
        p.close()


def _effects(path: Path) -> list[tuple[str, str, int]]:
    """(task id, step id, pid) per effect line, in the order they were written."""
    return [(task_id, step_id, pid) for task_id, step_id, pid, _ in _runs(path)]


def _runs(path: Path) -> list[tuple[str, str, int, int]]:
    """(task id, step id, pid, attempt) per effect line, in the order they were written."""
    if not path.exists():
        return []
    text = path.read_text()
    # Read while workers append, the last line may be half there (a reader can see a
    # write before it is whole): it is counted once it ends with its newline.
    lines = text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]
    out = []
    for line in lines:
        key, pid, attempt = line.split(" ")
        task_id, step_id = key.split("/", 1)
        out.append((task_id, step_id, int(pid), int(attempt)))
    return out


_LET_GO = frozenset({"lease_lost", "step_refused", "commit_refused"})


def _let_go(log: str) -> set[str]:
    """The tasks a worker's log says it lost to another consumer while it lived."""
    out = set()
    for line in log.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("action") in _LET_GO:
                out.add(record["task_id"])
    return out


def _lane(step_id: str) -> str:
    """The lane a step id belongs to: ``g0.2`` for ``g0.2#lane#3``, "" for the root lane."""
    return step_id.split("#", 1)[0] if step_id.startswith("g") else ""


async def test_steps_resume_after_kill_9_and_completed_steps_never_run_again(
    client: Redis, prefix: str, steps_config: Path, steps_procs: Procs, tmp_path: Path
) -> None:
    rng = random.Random(19)
    effects = tmp_path / "effects.log"
    config = load_config(steps_config)
    settings = Settings(prefix=prefix)
    workers = [steps_procs.worker(AGENT) for _ in range(2)]
    await registered(client, prefix, "pipeline", 2)
    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        payload = {"effects": str(effects), "sleep": 0.05}
        handles = await orch.submit_many(
            [Task(intent="pipeline", payload=payload) for _ in range(TASKS)]
        )
        killed: set[int] = set()
        for _ in range(KILLS):
            target = len(_effects(effects)) + rng.randint(150, 450)

            async def progressed(target: int = target) -> bool:
                return len(_effects(effects)) >= target

            await eventually(progressed, timeout=60, what=f"{target} step effects")
            busy = {pid for _, _, pid in _effects(effects)[-40:]}  # one that runs steps now
            victim = rng.choice([w for w in workers if w.pid in busy and w.poll() is None])
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)
            killed.add(victim.pid)
            workers[workers.index(victim)] = steps_procs.worker(AGENT)
        results = await asyncio.gather(*(h.result(timeout=120) for h in handles))
    assert all(r.status is ResultStatus.SUCCESS for r in results), [
        r.error for r in results if r.status is not ResultStatus.SUCCESS
    ][:3]
    task_ids = [h.task_id for h in handles]
    assert_committed_once(await committed_events(client, prefix, "pipeline", SHARDS), task_ids)

    # A run is (pid, attempt): one delivery of the task, on one worker.
    runs: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    in_lane: dict[tuple[str, tuple[int, int], str], list[str]] = defaultdict(list)  # run order
    for task_id, step_id, pid, attempt in _runs(effects):
        runs[(task_id, step_id)].append((pid, attempt))
        in_lane[(task_id, (pid, attempt), _lane(step_id))].append(step_id)
    let_go = {proc.pid: _let_go(steps_procs.log(proc)) for proc in steps_procs.procs}
    # (task, the run it left unrecorded): its steps that ran again
    reruns: dict[tuple[str, tuple[int, int]], list[str]] = defaultdict(list)
    for handle in handles:
        keys = f"{prefix}:{{pipeline:{handle.shard}}}:s:{handle.task_id}"
        stored = {as_bytes(k).decode(): v for k, v in (await client.hgetall(keys)).items()}
        # Each step's record holds its fn's answer, the pid of the worker that recorded it.
        recorded = {k[5:]: orjson.loads(v)["pid"] for k, v in stored.items() if k[:5] == "step:"}
        assert len(recorded) == STEPS, f"{handle.task_id}: {len(recorded)} steps recorded"
        for step_id, owner in recorded.items():
            step_runs = runs[(handle.task_id, step_id)]
            mine = [i for i, (pid, _) in enumerate(step_runs) if pid == owner]
            assert mine, f"recorded step {handle.task_id}/{step_id} never ran its effect there"
            # Every other run was in flight on a worker that was killed, or that lost the
            # task's lease and said so (a starved one may finish its run after the new
            # owner's: so the recorded run is found by its pid, not taken as the last).
            for pid, attempt in step_runs[: mine[-1]] + step_runs[mine[-1] + 1 :]:
                assert pid in killed or handle.task_id in let_go.get(pid, set()), (
                    f"{handle.task_id}/{step_id} ran again: {step_runs} (pid, attempt), "
                    f"recorded by {owner}; killed {sorted(killed)}; "
                    f"pid {pid} let go of {sorted(let_go.get(pid, []))}"
                )
                reruns[(handle.task_id, (pid, attempt))].append(step_id)
    for (task_id, run), steps in reruns.items():
        lanes = [_lane(s) for s in steps]
        assert len(set(lanes)) == len(lanes), f"two steps of one lane reran after {run}: {steps}"
        assert len(steps) <= LANES
        for step_id in steps:  # the one in flight: the last its lane ran in that delivery
            assert in_lane[(task_id, run, _lane(step_id))][-1] == step_id, (task_id, step_id)
    # The kills hit tasks mid-run: some ran steps on a killed worker and the rest elsewhere.
    pids_of: dict[str, set[int]] = defaultdict(set)
    for (task_id, _), step_runs in runs.items():
        pids_of[task_id].update(pid for pid, _ in step_runs)
    resumed = [t for t, pids in pids_of.items() if pids & killed and pids - killed]
    assert resumed, "some tasks must have resumed on another worker after a kill"


async def test_the_step_in_flight_at_a_kill_runs_again_and_the_one_before_does_not(
    client: Redis, prefix: str, steps_config: Path, steps_procs: Procs, tmp_path: Path
) -> None:
    """The in-flight rule, made deterministic: the kill lands after a step's effect and
    before its record (its fn sleeps after the effect). The step runs again on the next
    worker, as the rule says it may; the step recorded before it does not."""
    effects = tmp_path / "effects.log"
    victim = steps_procs.worker(AGENT)
    config = load_config(steps_config)
    async with Orchestrator.from_client(
        client, config=config, settings=Settings(prefix=prefix)
    ) as orch:
        payload = {"effects": str(effects), "effect_then_sleep": 3.0}
        handle = await orch.submit(Task(intent="pipeline", payload=payload))

        async def in_flight() -> bool:
            return any(s == "in_flight" for _, s, _ in _effects(effects))

        await eventually(in_flight, timeout=30, what="the second step's effect")
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        survivor = steps_procs.worker(AGENT)
        result = await handle.result(timeout=60)
    assert result.status is ResultStatus.SUCCESS and result.output == {"pid": survivor.pid}
    runs = [(step, pid) for _, step, pid in _effects(effects)]
    assert runs == [("quick", victim.pid), ("in_flight", victim.pid), ("in_flight", survivor.pid)]
    assert result.metrics.attempts == 2
