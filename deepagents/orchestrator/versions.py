"""Which version of an agent a new task goes to while a rollout runs (docs/rollouts.md).

The split is by a stable hash of the sticky key (the task id, or the tenant): the same
key lands on the same side in every process and every release, and as the canary's
weight grows a key only ever moves from stable to canary, never back and forth. A version
with no live worker gets no new tasks while the other one has live workers.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import dataclass

from prometheus_client import Counter

from deepagents.compose import Services
from deepagents.config.schema import FileConfig
from deepagents.contract.task import Task
from deepagents.errors import ConfigError, TransportError
from deepagents.store.base import Rollouts
from deepagents.store.rollout_state import RolloutState
from deepagents.telemetry.core import Telemetry

log = logging.getLogger("deepagents.orchestrator")

REFRESH_S = 1.0


def share_of(key: str) -> float:
    """A key's place in [0, 1): BLAKE2b, the same in every process (not Python's ``hash``)."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def sticky_key(task: Task, sticky_by: str) -> str:
    if sticky_by == "tenant" and task.tenant:
        return "tenant:" + task.tenant
    return "task:" + task.task_id


def split(state: RolloutState, task: Task) -> str:
    """The version the weights give ``task``, before liveness."""
    if state.canary and share_of(sticky_key(task, state.sticky_by)) < state.weight:
        return state.canary
    return state.stable


@dataclass(frozen=True, slots=True)
class Snapshot:
    state: RolloutState
    live: dict[str, int]  # version -> instances with a fresh heartbeat
    # chosen version -> the version it goes to: itself when it has a live worker or no
    # version has one, else the other (computed once per refresh, not per task)
    goes_to: dict[str, str]

    @classmethod
    def of(cls, state: RolloutState, live: dict[str, int]) -> Snapshot:
        alive = [v for v in state.versions if live.get(v, 0) > 0]
        goes_to = {v: v if v in alive or not alive else alive[0] for v in state.versions}
        return cls(state, live, goes_to)


class VersionRouting:
    """The routing hook: ``version_for`` answers from a snapshot that ``run`` refreshes
    every second (rollout state and live workers from Redis), so a submit costs no round
    trip. Before the first refresh, the configuration's values are used."""

    def __init__(
        self, config: FileConfig, rollouts: Rollouts, rerouted: Counter | None = None
    ) -> None:
        self.config = config
        self.rollouts = rollouts
        self.snapshots: dict[str, Snapshot] = {}
        self._rerouted = rerouted

    def version_for(self, agent: str, task: Task) -> str:
        """ "" for an agent under no rollout (its unversioned streams)."""
        rollout = self.config.rollouts.get(agent)
        if rollout is None:
            return ""
        snap = self.snapshots.get(agent)
        if snap is None:
            return split(RolloutState.initial(agent, rollout), task)
        chosen = split(snap.state, task)
        goes = snap.goes_to[chosen]
        if goes != chosen and self._rerouted is not None:
            self._rerouted.labels(agent, chosen).inc()
        return goes

    async def refresh(self) -> None:
        snapshots = {}
        for agent, rollout in self.config.rollouts.items():
            try:
                state = await self.rollouts.ensure(RolloutState.initial(agent, rollout))
            except ConfigError as exc:  # a damaged state: route by the configuration
                log.error("%s", exc, extra={"action": "rollout_state_bad", "agent": agent})
                continue
            stale_ms = self.config.agent_settings(agent).visibility_timeout_ms
            live = await self.rollouts.live_versions(agent, stale_ms)
            snapshots[agent] = Snapshot.of(state, live)
        self.snapshots = snapshots

    async def run(self, interval_s: float = REFRESH_S) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.refresh()
            except TransportError as exc:
                # Routing goes on from the last snapshot; the next refresh tries again.
                log.warning(
                    "refreshing rollout state failed: %s", exc, extra={"action": "rollout_stale"}
                )


def version_routing(
    config: FileConfig, services: Services, telemetry: Telemetry
) -> VersionRouting | None:
    """The rollout hook, when the configuration has rollouts (else routing is unversioned)."""
    if services.rollouts is None or not config.rollouts:
        return None
    metrics = telemetry.metrics
    rerouted = metrics.rollout_rerouted if metrics is not None else None
    return VersionRouting(config, services.rollouts, rerouted)
