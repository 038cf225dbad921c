"""A child's model spend rolls up into its parent, on real worker processes and the model
simulator: the parent's ``Result.metrics`` hold the sum of its children's tokens and cost,
and a parent whose spend limit (``Limits(cost_usd=...)``) its children used up is refused
its next model call with the limit's error, before the call reaches the model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from deepagents.config import Settings, load_config
from deepagents.contract import ErrorCode, ResultStatus, Task
from deepagents.modelcall.simulator import SimSettings, SimulatorThread
from deepagents.orchestrator import Orchestrator
from tests.e2e.conftest import registered, worker_procs
from tests.support.procs import Procs

CONFIG = """
tiers:
  p2: {{concurrency: 10, max_wait_ms: 600000}}
default_tier: p2
defaults:
  max_deliveries: 5
  visibility_timeout_ms: 1000
  block_ms: 200
  grace_period_s: 5
agents:
  spender: {{class: "tests.support.delegation:SpendingParent", settings: {{shards: 1}}}}
  metered: {{class: "tests.support.delegation:MeteredChild", settings: {{shards: 2}}}}
models:
  sim:
    base_url: "{url}"
    max_tokens: 64
    price_in_per_1k: 0.5
    price_out_per_1k: 1.5
"""


@pytest.fixture
def sim() -> Iterator[SimulatorThread]:
    with SimulatorThread(SimSettings(latency_s=0.01, completion_tokens=20, seed=7)) as thread:
        yield thread


def _served(sim: SimulatorThread) -> int:
    return sum(1 for entry in sim.log() if entry.status == 200)


async def test_children_s_spend_rolls_up_and_exhausts_the_parent_s_limit(
    redis_url: str, client: Redis, prefix: str, tmp_path: Path, sim: SimulatorThread
) -> None:
    path = tmp_path / "spend.yaml"
    path.write_text(CONFIG.format(url=sim.url))
    procs: Procs = worker_procs(redis_url, prefix, path)
    try:
        procs.worker("tests.support.delegation:SpendingParent")
        procs.worker("tests.support.delegation:MeteredChild")
        await registered(client, prefix, "spender", 1)
        await registered(client, prefix, "metered", 1)
        settings = Settings(prefix=prefix)
        async with Orchestrator.from_client(
            client, config=load_config(path), settings=settings
        ) as orch:
            summed = await orch.submit(Task(intent="spend", payload={"n": 2}))
            # children's spend (each well above a micro-dollar) passes this limit
            limited = await orch.submit(
                Task(intent="spend", payload={"n": 2, "ask": True, "cost_usd": 0.000001})
            )
            total = await summed.result(timeout=120)
            refused = await limited.result(timeout=120)
            children = [await orch.get_result(c) for c in total.output["children"]]
            info = await orch.lookup(limited.task_id)
    finally:
        procs.close()
    assert total.status is ResultStatus.SUCCESS, total.error
    assert all(c is not None and c.status is ResultStatus.SUCCESS for c in children)
    spent = [c.metrics for c in children if c is not None]
    assert all(m.tokens_used > 20 and m.cost_usd > 0 for m in spent)  # metered calls
    assert total.metrics.tokens_used == sum(m.tokens_used for m in spent)
    assert total.metrics.cost_usd == pytest.approx(sum(m.cost_usd for m in spent), abs=1e-6)
    # the limited parent: its two children ran and spent, its own call was refused
    assert refused.error is not None and refused.error.code == ErrorCode.LIMIT_EXCEEDED
    assert "of its cost_usd limit $1e-06" in refused.error.message
    assert "from its children" in refused.error.message
    assert info is not None and len(info["children"].split()) == 2
    assert refused.metrics.cost_usd > 0.000001  # the children's spend, in its metrics too
    assert _served(sim) == 4  # four children's calls; the refused one never reached the model
