"""The canary's share of new tasks, through the orchestrator onto real Redis streams: 80/20
over 10,000 tasks within 2 points, and ``sticky_by: tenant`` keeps each tenant on one
version (as the weight grows a tenant only moves from stable to canary)."""

from __future__ import annotations

from collections import defaultdict

import orjson
from redis.asyncio import Redis

from deepagents.config import Settings
from deepagents.contract import Task
from deepagents.orchestrator import Orchestrator
from deepagents.orchestrator.versions import share_of, split
from deepagents.store.rollout_state import RolloutState
from tests.rollout.agents import NAME, StableAgent
from tests.rollout.conftest import rollout_config, stream_lengths
from tests.support.replies import entries

N = 10_000


async def test_an_80_20_split_over_10000_tasks_is_within_2_points(
    client: Redis, settings: Settings, prefix: str
) -> None:
    config = rollout_config(weight=0.2)
    async with Orchestrator.from_client(
        client, config=config, settings=settings, agents=[StableAgent]
    ) as orch:
        for start in range(0, N, 1_000):
            await orch.submit_many(
                [Task(intent="canaried", payload={"n": i}) for i in range(start, start + 1_000)]
            )
    lengths = await stream_lengths(client, prefix, config)
    assert lengths[""] == 0  # nothing on the unversioned streams under a rollout
    assert lengths["1.2.0"] + lengths["1.3.0"] == N
    assert abs(lengths["1.3.0"] / N - 0.2) <= 0.02, lengths


async def test_sticky_by_tenant_keeps_every_tenant_on_one_version(
    client: Redis, settings: Settings, prefix: str
) -> None:
    config = rollout_config(weight=0.3, sticky_by="tenant")
    tenants = [f"tenant-{i}" for i in range(200)]
    async with Orchestrator.from_client(
        client, config=config, settings=settings, agents=[StableAgent]
    ) as orch:
        await orch.submit_many(
            [Task(intent="canaried", tenant=tenants[i % 200], payload={}) for i in range(4_000)]
        )
    seen: dict[str, set[str]] = defaultdict(set)
    for version in ("1.2.0", "1.3.0"):
        for shard in range(2):
            stream = f"{prefix}:{{{NAME}:{shard}}}:v:{version}:p2"
            for _, fields in await entries(client, stream):
                seen[orjson.loads(fields[b"task"])["tenant"]].add(version)
    assert len(seen) == 200
    assert all(len(versions) == 1 for versions in seen.values()), seen
    on_canary = sum(1 for versions in seen.values() if versions == {"1.3.0"})
    assert 0 < on_canary < 200  # both versions got tenants


def test_a_growing_weight_only_moves_keys_from_stable_to_canary() -> None:
    tasks = [Task(intent="canaried", tenant=f"t{i}", payload={}) for i in range(2_000)]
    state = RolloutState(NAME, "1.2.0", "1.3.0", 0.0, "tenant")
    before = {t.tenant: split(state, t) for t in tasks}
    for weight in (0.1, 0.25, 0.5, 0.99):
        state = RolloutState(NAME, "1.2.0", "1.3.0", weight, "tenant")
        now = {t.tenant: split(state, t) for t in tasks}
        assert all(now[k] == "1.3.0" for k, v in before.items() if v == "1.3.0")
        before = now


def test_the_share_is_the_same_in_every_process() -> None:
    # BLAKE2b, not Python's salted hash: a fixed value, whatever PYTHONHASHSEED is.
    assert share_of("task:0191d6d4-0000-7000-8000-000000000000") == 0.1188988107882219
