"""A worker's per-version counts: Prometheus under a bounded ``version`` label, and the
Redis buckets the controller reads (here the in-memory store, the same sums)."""

from __future__ import annotations

from deepagents.config import FileConfig
from deepagents.store.memory_registry import MemoryRegistry
from deepagents.store.memory_rollouts import MemoryRollouts
from deepagents.telemetry.metrics import Metrics
from deepagents.worker.versioning import VersionTally, stream_version, version_label
from tests.rollout.agents import CanaryAgent, StableAgent
from tests.rollout.conftest import rollout_config


class Nightly(StableAgent):
    version = "2.0.0-nightly"


async def test_outcomes_are_counted_per_version_with_bounded_labels() -> None:
    config = rollout_config()
    rollouts = MemoryRollouts(MemoryRegistry())
    metrics = Metrics()
    canary = VersionTally(CanaryAgent(), config, rollouts, metrics)
    for outcome in ["success"] * 7 + ["partial", "failed", "dead_lettered"]:
        canary.add(outcome, 0.02)
    nightly = VersionTally(Nightly(), config, rollouts, metrics)
    nightly.add("success", 0.5)
    await canary.flush()
    await nightly.flush()
    sample = metrics.registry.get_sample_value
    labels = {"agent": "canaried", "version": "1.3.0"}
    assert sample("deepagents_version_tasks_total", {**labels, "outcome": "ok"}) == 8
    assert sample("deepagents_version_tasks_total", {**labels, "outcome": "error"}) == 2
    other = {"agent": "canaried", "version": "other", "outcome": "ok"}
    assert sample("deepagents_version_tasks_total", other) == 1
    window = (await rollouts.window("canaried", ["1.3.0"], 60))["1.3.0"]
    assert (window.samples, window.errors, window.p95_ms) == (10, 2, 25.0)


def test_only_an_agent_under_a_rollout_reads_versioned_streams() -> None:
    assert stream_version(rollout_config(), CanaryAgent()) == "1.3.0"
    assert stream_version(FileConfig(), CanaryAgent()) == ""
    assert version_label(rollout_config(), Nightly()) == "other"
