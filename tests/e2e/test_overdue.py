"""Issue 22: the overdue actions act. Each tier's pool holds one task at a time; a task
that sleeps past max_wait_ms makes the next one wait, and that one meets its tier's
on_overdue: alert (it runs; counted and audited), degrade (degraded_execute, else the last
good answer for its cache key, else the next tier), drop (failed, dropped). Real Redis,
a real worker in this process, the outbox on."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from deepagents.config import FileConfig, Settings, parse_config
from deepagents.contract import AgentContract, Result, ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from deepagents.telemetry import Metrics, Telemetry, Tracing
from deepagents.transport.keys import Keys
from deepagents.worker import Worker
from tests.e2e.overdue_agents import CachingNapAgent, DegradableNapAgent, NapAgent
from tests.support.replies import as_bytes, entries
from tests.support.workers import running

MAX_WAIT_MS = 800
NAP_S = MAX_WAIT_MS / 1000 * 2  # the first task's run: the next one waits at least this

CONFIG = f"""
tiers:
  p0: {{concurrency: 1, max_wait_ms: {MAX_WAIT_MS}, on_overdue: alert}}
  p1: {{concurrency: 1, max_wait_ms: {MAX_WAIT_MS}, on_overdue: degrade}}
  p2: {{concurrency: 1, max_wait_ms: {MAX_WAIT_MS}, on_overdue: drop}}
defaults: {{shards: 1, block_ms: 100, visibility_timeout_ms: 10000, answer_cache_ttl_s: 600}}
agents:
  nap: {{class: "tests.e2e.overdue_agents:NapAgent"}}
  nap_degradable: {{class: "tests.e2e.overdue_agents:DegradableNapAgent"}}
  nap_caching: {{class: "tests.e2e.overdue_agents:CachingNapAgent"}}
"""


@pytest.fixture
def config() -> FileConfig:
    return parse_config(CONFIG)


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


def _worker(
    agent: AgentContract, client: Redis, config: FileConfig, settings: Settings, m: Metrics
) -> Worker:
    telemetry = Telemetry(metrics=m, tracing=Tracing(None))
    return Worker.from_client(
        agent, client=client, config=config, settings=settings, telemetry=telemetry
    )


async def _behind_a_nap(
    orch: Orchestrator, agent: str, tier: int, late: dict[str, Any] | None = None, **payload: Any
) -> tuple[Result, Result]:
    """A task that sleeps NAP_S, then one submitted right after it on the same tier (so it
    waits for the pool's only slot; ``late`` adds to its payload): both results."""
    intent = agent
    first = await orch.submit(
        Task(intent=intent, priority=tier, payload={"sleep": NAP_S, "n": 1, **payload})
    )
    body = {"n": 2, **payload, **(late or {})}
    second = await orch.submit(Task(intent=intent, priority=tier, payload=body))
    return await first.result(timeout=60), await second.result(timeout=60)


async def _events(client: Redis, prefix: str, agent: str, task_id: str) -> list[dict[str, Any]]:
    """The task's audit events in the shard's outbox, in order."""
    out = []
    for _, fields in await entries(client, Keys(prefix).shard(agent, 0).outbox):
        out += [e for e in orjson.loads(fields[b"events"]) if e["task_id"] == task_id]
    return out


def _overdue_count(m: Metrics, agent: str, tier: str, action: str) -> float:
    labels = {"agent": agent, "tier": tier, "action": action}
    return m.registry.get_sample_value("deepagents_tasks_overdue_total", labels) or 0.0


def _overdue_event(events: list[dict[str, Any]]) -> dict[str, Any]:
    (event,) = [e for e in events if e["type"] == "overdue"]
    assert event["queue_ms"] > MAX_WAIT_MS
    assert event["max_wait_ms"] == MAX_WAIT_MS
    return event


async def test_alert_runs_the_late_task_and_counts_and_audits_it(
    client: Redis, orch: Orchestrator, config: FileConfig, settings: Settings, metrics: Metrics
) -> None:
    async with running(_worker(NapAgent(), client, config, settings, metrics)):
        _, late = await _behind_a_nap(orch, "nap", 0)
    assert late.status is ResultStatus.SUCCESS and not late.degraded
    assert late.output == {"n": 2, "path": "execute"}  # it ran, late
    assert late.metrics.queue_ms is not None and late.metrics.queue_ms > MAX_WAIT_MS
    assert _overdue_count(metrics, "nap", "p0", "alert") >= 1
    # Every tier's series exists from the start (at 0): alert rules see the first increase.
    drops = {"agent": "nap", "tier": "p2", "action": "drop"}
    assert metrics.registry.get_sample_value("deepagents_tasks_overdue_total", drops) == 0.0
    assert late.task_id is not None
    events = await _events(client, settings.prefix, "nap", late.task_id)
    event = _overdue_event(events)
    assert (event["on_overdue"], event["outcome"], event["tier"]) == ("alert", "ran late", "p0")
    assert [e["type"] for e in events] == ["submitted", "started", "overdue", "succeeded"]


async def test_degrade_runs_the_agents_degraded_execute(
    client: Redis, orch: Orchestrator, config: FileConfig, settings: Settings, metrics: Metrics
) -> None:
    agent = DegradableNapAgent()
    async with running(_worker(agent, client, config, settings, metrics)):
        _, late = await _behind_a_nap(orch, agent.name, 1)
    assert late.status is ResultStatus.SUCCESS and late.degraded
    assert late.output == {"n": 2, "path": "degraded_execute"}
    assert _overdue_count(metrics, agent.name, "p1", "degrade") >= 1
    assert late.task_id is not None
    events = await _events(client, settings.prefix, agent.name, late.task_id)
    assert _overdue_event(events)["outcome"] == "degraded_execute"
    assert events[-1]["type"] == "succeeded" and events[-1]["result"]["degraded"] is True


async def test_degrade_answers_from_the_last_good_answer_for_the_same_key(
    client: Redis, orch: Orchestrator, config: FileConfig, settings: Settings, metrics: Metrics
) -> None:
    agent = CachingNapAgent()
    async with running(_worker(agent, client, config, settings, metrics)):
        first, late = await _behind_a_nap(orch, agent.name, 1, key="EURUSD")
        # The same wait for a key nothing answered yet: it moves a tier down (p2, whose
        # pool is free) and runs there, not degraded.
        _, other = await _behind_a_nap(orch, agent.name, 1, {"key": "USDJPY"}, key="GBPUSD")
    assert first.output == {"n": 1, "path": "execute"} and not first.degraded
    # The first task's answer (n=1), standing in for the second's, marked degraded.
    assert late.status is ResultStatus.SUCCESS and late.degraded
    assert late.output == {"n": 1, "path": "execute"}
    assert late.task_id is not None
    events = await _events(client, settings.prefix, agent.name, late.task_id)
    assert _overdue_event(events)["outcome"] == "cached answer"
    assert [e["type"] for e in events] == ["submitted", "started", "overdue", "succeeded"]
    assert other.output == {"n": 2, "path": "execute"} and not other.degraded
    assert other.task_id is not None
    events = await _events(client, settings.prefix, agent.name, other.task_id)
    assert _overdue_event(events)["outcome"] == "moved to the next tier"
    assert _overdue_count(metrics, agent.name, "p1", "degrade") >= 2
    # One value per key, with the configured TTL: the cache stays bounded.
    key = Keys(settings.prefix).answer(agent.name, "EURUSD")
    assert orjson.loads(as_bytes(await client.get(key))) == {"n": 1, "path": "execute"}
    assert 0 < await client.ttl(key) <= 600


async def test_degrade_without_a_degraded_path_moves_the_task_to_the_next_tier(
    client: Redis, orch: Orchestrator, config: FileConfig, settings: Settings, metrics: Metrics
) -> None:
    async with running(_worker(NapAgent(), client, config, settings, metrics)):
        _, late = await _behind_a_nap(orch, "nap", 1)
    assert late.status is ResultStatus.SUCCESS and not late.degraded
    assert late.output == {"n": 2, "path": "execute"}
    assert _overdue_count(metrics, "nap", "p1", "degrade") >= 1
    assert late.task_id is not None
    events = await _events(client, settings.prefix, "nap", late.task_id)
    assert _overdue_event(events)["outcome"] == "moved to the next tier"
    (moved,) = [e for e in events if e["type"] == "degraded"]
    assert moved["to_tier"] == "p2"
    assert events[-1]["type"] == "succeeded" and events[-1]["tier"] == "p2"


async def test_drop_fails_the_late_task_with_dropped_unrun(
    client: Redis, orch: Orchestrator, config: FileConfig, settings: Settings, metrics: Metrics
) -> None:
    async with running(_worker(NapAgent(), client, config, settings, metrics)):
        _, late = await _behind_a_nap(orch, "nap", 2)
    assert late.status is ResultStatus.FAILED and late.error is not None
    assert late.error.code == "dropped"
    assert "in p2" in late.error.message and late.output is None  # never ran
    assert _overdue_count(metrics, "nap", "p2", "drop") >= 1
    assert late.task_id is not None
    events = await _events(client, settings.prefix, "nap", late.task_id)
    assert _overdue_event(events)["outcome"] == "dropped"
    assert [e["type"] for e in events] == ["submitted", "started", "overdue", "dropped"]


async def test_a_damaged_cached_answer_is_no_stand_in(
    client: Redis, orch: Orchestrator, config: FileConfig, settings: Settings, metrics: Metrics
) -> None:
    agent = CachingNapAgent()
    await client.set(Keys(settings.prefix).answer(agent.name, "XAUUSD"), b"{not json")
    async with running(_worker(agent, client, config, settings, metrics)):
        _, late = await _behind_a_nap(orch, agent.name, 1, {"key": "XAUUSD"}, key="EURCHF")
    assert late.output == {"n": 2, "path": "execute"} and not late.degraded
    assert late.task_id is not None
    events = await _events(client, settings.prefix, agent.name, late.task_id)
    assert _overdue_event(events)["outcome"] == "moved to the next tier"
