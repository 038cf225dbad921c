"""A worker's side of a rollout (docs/rollouts.md): which streams it reads, and the
outcomes it counts for its version.

Under a rollout a worker reads only its own version's streams and delayed set (a
version's tasks are read only by that version's workers). Each commit that lands is
counted, per version, in Redis buckets the rollout controller compares, and in
Prometheus under a bounded ``version`` label.
"""

from __future__ import annotations

import asyncio
import logging
import time

from deepagents.config.schema import FileConfig
from deepagents.contract.agent import AgentContract
from deepagents.errors import TransportError
from deepagents.store.base import Rollouts
from deepagents.store.rollout_state import Tally
from deepagents.telemetry.metrics import Metrics

log = logging.getLogger("deepagents.worker")

FLUSH_S = 1.0
OK_OUTCOMES = frozenset({"success", "partial"})


def stream_version(config: FileConfig, agent: AgentContract) -> str:
    """The version whose streams this worker reads: "" (unversioned) without a rollout."""
    return agent.version if config.versioned(agent.name) else ""


def version_label(config: FileConfig, agent: AgentContract) -> str:
    """A configured version of the agent's rollout, else ``other``: bounded label values."""
    rollout = config.rollouts.get(agent.name)
    known = () if rollout is None else (rollout.stable, rollout.canary)
    return agent.version if agent.version in known else "other"


class VersionTally:
    """Counts landed outcomes (``add``, on the loop, no await) and flushes them to the
    rollout store every second (``run``) and once more at the end (``flush``). A count
    lost to a crash between a commit and a flush only makes a window smaller."""

    def __init__(
        self, agent: AgentContract, config: FileConfig, rollouts: Rollouts, metrics: Metrics | None
    ) -> None:
        self.agent, self.version = agent.name, agent.version
        self.rollouts = rollouts
        self._tally = Tally({})
        label = version_label(config, agent)
        self._ok = self._err = self._latency = None
        if metrics is not None:
            self._ok = metrics.rollout.tasks.labels(agent.name, label, "ok")
            self._err = metrics.rollout.tasks.labels(agent.name, label, "error")
            self._latency = metrics.rollout.latency.labels(agent.name, label)

    def add(self, outcome: str, run_s: float) -> None:
        ok = outcome in OK_OUTCOMES
        self._tally.add(ok, run_s * 1000, time.time())
        counter = self._ok if ok else self._err
        if counter is not None:
            counter.inc()
        if self._latency is not None:
            self._latency.observe_many([run_s])

    async def flush(self) -> None:
        buckets = self._tally.take()
        try:
            await self.rollouts.record(self.agent, self.version, buckets)
        except TransportError as exc:
            self._merge_back(buckets)  # tried again at the next flush
            log.warning("recording version outcomes failed: %s", exc)

    def _merge_back(self, buckets: dict[int, dict[str, int]]) -> None:
        for start, fields in buckets.items():
            held = self._tally.buckets.setdefault(start, {})
            for name, n in fields.items():
                held[name] = held.get(name, 0) + n

    async def run(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_S)
            await self.flush()
