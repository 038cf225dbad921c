"""A paused worker cannot write steps: stopped with SIGSTOP past the visibility timeout, its
entries reclaimed by a peer, then SIGCONT. Its late step record and its late checkpoint are
both refused by the owner check (counted, and said in its log), and the records hold the
peer's values only."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis

from deepagents.config import Settings, load_config
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from tests.e2e.conftest import assert_committed_once, committed_events, worker_procs
from tests.e2e.steps_support import write_config
from tests.support.procs import Procs
from tests.support.replies import as_bytes
from tests.support.wait import eventually
from tests.telemetry.support import free_port, samples, scrape

AGENT = "tests.steps_agents:PipelineAgent"


@pytest.fixture
def fence_procs(redis_url: str, prefix: str, tmp_path: Path, client: Redis) -> Iterator[Procs]:
    p = worker_procs(redis_url, prefix, write_config(tmp_path))
    try:
        yield p
    finally:
        p.close()


async def test_a_paused_worker_whose_entries_were_reclaimed_records_nothing(
    client: Redis, prefix: str, fence_procs: Procs, tmp_path: Path
) -> None:
    # The paused worker beats rarely: on waking, its heartbeat would otherwise learn of the
    # reclaim first and cancel the runs, and the fence would never be reached.
    rare = write_config(tmp_path, settings="heartbeat_ms: 600000", name="rare.yaml")
    port = free_port()
    paused = fence_procs.worker(AGENT, "--consumer", "paused", "--metrics-port", str(port),
                                env={"DEEPAGENTS_CONFIG": str(rare)})  # fmt: skip
    config = load_config(write_config(tmp_path))
    async with Orchestrator.from_client(
        client, config=config, settings=Settings(prefix=prefix)
    ) as orch:
        step_task = await orch.submit(Task(intent="pipeline", payload={"slow_step": 2.0}))
        state_task = await orch.submit(Task(intent="pipeline", payload={"slow_checkpoint": 2.0}))
        handles = [step_task, state_task]

        async def running_on(consumer: str) -> bool:
            for h in handles:
                owner = await client.hget(f"{prefix}:{{pipeline:{h.shard}}}:t:{h.task_id}", "owner")
                if owner != consumer.encode():
                    return False
            return True

        await eventually(lambda: running_on("paused"), timeout=30, what="both on the paused worker")
        paused.send_signal(signal.SIGSTOP)
        peer = fence_procs.worker(AGENT, "--consumer", "peer")
        await eventually(lambda: running_on("peer"), timeout=30, what="the peer to reclaim both")
        paused.send_signal(signal.SIGCONT)  # its sleeps are over: it records at once

        async def refused() -> bool:
            log = fence_procs.output(paused)
            return all(f"step record of task {h.task_id} refused" in log for h in handles)

        await eventually(refused, timeout=20, what="the paused worker's two records refused")
        results = [await h.result(timeout=60) for h in handles]
    assert all(r.status is ResultStatus.SUCCESS for r in results), results
    assert all(r.output == {"pid": peer.pid} for r in results), results
    steps = f"{prefix}:{{pipeline:{step_task.shard}}}:s:{step_task.task_id}"
    assert orjson.loads(as_bytes(await client.hget(steps, "step:slow"))) == peer.pid
    state = f"{prefix}:{{pipeline:{state_task.shard}}}:s:{state_task.task_id}"
    assert orjson.loads(as_bytes(await client.hget(state, "state")))["owner"] == peer.pid
    committed = await committed_events(client, prefix, "pipeline", 2)
    assert_committed_once(committed, [h.task_id for h in handles])
    assert all(committed[h.task_id][0]["consumer"] == "peer" for h in handles)
    # Counted: two refusals, and no step of the paused worker's was recorded.
    metrics = samples(scrape(port))
    assert metrics["deepagents_step_writes_refused_total"] == [({"agent": "pipeline"}, 2.0)]
    completed = metrics.get("deepagents_steps_total", [])
    assert not [v for labels, v in completed if labels["outcome"] == "completed" and v], completed
    paused.terminate()
    assert paused.wait(30) == 0, fence_procs.output(paused)
