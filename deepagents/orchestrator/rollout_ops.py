"""The operations on a rollout the CLI and the controller share: start, set the weight,
promote, roll back, sweep, status. Each change is a compare-and-set on the shared state
and goes to the audit log with who made it and why (docs/rollouts.md)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from deepagents.compose import Services
from deepagents.config.rollouts import RolloutConfig, check_version
from deepagents.config.schema import FileConfig
from deepagents.contract.events import AuditEvent
from deepagents.errors import ConfigError
from deepagents.store.base import Rollouts
from deepagents.store.rollout_state import RolloutState, now_ms
from deepagents.transport.base import Moved, StreamRef

log = logging.getLogger("deepagents.rollout")

_SWAP_TRIES = 20


class RolloutConflict(ConfigError):
    """The state kept changing under this writer."""


@dataclass(frozen=True, slots=True)
class VersionStatus:
    version: str
    live_workers: int
    queued: int  # entries in the version's streams (pending included)
    pending: int  # delivered to a worker, not yet committed
    delayed: int  # retries waiting in the version's delayed sets


class RolloutOps:
    def __init__(self, services: Services, config: FileConfig, actor: str) -> None:
        if services.rollouts is None:
            raise ConfigError("these services keep no rollout state")
        self.services = services
        self.rollouts: Rollouts = services.rollouts
        self.config = config
        self.actor = actor

    def rollout_config(self, agent: str) -> RolloutConfig:
        found = self.config.rollouts.get(agent)
        if found is None:
            known = ", ".join(sorted(self.config.rollouts)) or "none"
            raise ConfigError(
                f"agent {agent!r} has no rollouts.{agent} section in the configuration "
                f"(agents under a rollout: {known})"
            )
        return found

    async def state(self, agent: str) -> RolloutState:
        return await self.rollouts.ensure(RolloutState.initial(agent, self.rollout_config(agent)))

    # changes ------------------------------------------------------------------------------

    async def change(
        self, agent: str, edit: Callable[[RolloutState], RolloutState], decision: str
    ) -> tuple[RolloutState, RolloutState]:
        """Apply ``edit`` to the current state until the compare-and-set holds; returns
        (before, after). ``edit`` raises ``ConfigError`` when the change does not apply."""
        for _ in range(_SWAP_TRIES):
            before = await self.state(agent)
            after = edit(before)
            if await self.rollouts.swap(before, after):
                return before, after
        raise RolloutConflict(f"rollout of {agent!r} kept changing; {decision} not applied")

    async def start(
        self, agent: str, canary: str, weight: float, stable: str | None = None
    ) -> RolloutState:
        check_weight(weight)
        _version(canary)

        def edit(s: RolloutState) -> RolloutState:
            base = _version(stable or s.stable)
            if canary == base:
                raise ConfigError(f"canary {canary} is the stable version")
            return s.change(
                by=self.actor,
                reason=f"canary {canary} started at {weight:.0%}",
                stable=base,
                canary=canary,
                weight=weight,
                phase="canary",
                previous=None,
                unhealthy_since_ms=None,
                since_ms=now_ms(),  # the first step's hold starts now
            )

        before, after = await self.change(agent, edit, "start")
        moved = await self.sweep(after)  # what the unversioned streams still hold
        await self.audit(before, after, "start", moved=moved)
        return after

    async def set_weight(
        self,
        agent: str,
        weight: float,
        *,
        decision: str = "set_weight",
        reason: str = "",
        figures: dict[str, Any] | None = None,
    ) -> RolloutState:
        check_weight(weight)
        if weight >= 1.0:
            return await self.complete(agent, reason=reason, figures=figures)

        def edit(s: RolloutState) -> RolloutState:
            if s.canary is None:
                raise ConfigError(f"agent {agent!r} has no canary (phase {s.phase})")
            return s.change(
                by=self.actor, reason=reason or f"weight set to {weight:.0%}", weight=weight
            )

        before, after = await self.change(agent, edit, decision)
        await self.audit(before, after, decision, figures=figures)
        return after

    async def promote(self, agent: str, weight: float | None = None) -> RolloutState:
        """To ``weight``, else the next configured step; the last step completes."""
        config = self.rollout_config(agent)
        current = await self.state(agent)
        if current.canary is None:
            raise ConfigError(f"agent {agent!r} has no canary to promote (phase {current.phase})")
        target = weight if weight is not None else next(
            (s for s in config.steps if s > current.weight), 1.0
        )  # fmt: skip
        return await self.set_weight(
            agent, target, decision="promote", reason=f"promoted to {target:.0%}"
        )

    async def complete(
        self, agent: str, *, reason: str = "", figures: dict[str, Any] | None = None
    ) -> RolloutState:
        """The canary becomes stable; the old stable's unstarted tasks move to it."""

        def edit(s: RolloutState) -> RolloutState:
            if s.canary is None:
                raise ConfigError(f"agent {agent!r} has no canary to promote (phase {s.phase})")
            return s.change(
                by=self.actor,
                reason=reason or f"{s.canary} promoted to stable",
                stable=s.canary,
                canary=None,
                previous=s.stable,
                weight=0.0,
                phase="promoted",
                unhealthy_since_ms=None,
            )

        before, after = await self.change(agent, edit, "complete")
        moved = await self.sweep(after)
        await self.audit(before, after, "complete", figures=figures, moved=moved)
        return after

    async def rollback(
        self, agent: str, *, reason: str = "", figures: dict[str, Any] | None = None
    ) -> RolloutState:
        """Everything new goes to stable, and the canary's unstarted tasks move there."""

        def edit(s: RolloutState) -> RolloutState:
            if s.canary is None:
                raise ConfigError(f"agent {agent!r} has no canary to roll back (phase {s.phase})")
            return s.change(
                by=self.actor,
                reason=reason or f"{s.canary} rolled back",
                canary=None,
                previous=s.canary,
                weight=0.0,
                phase="rolled_back",
                unhealthy_since_ms=None,
            )

        before, after = await self.change(agent, edit, "rollback")
        moved = await self.sweep(after)
        await self.audit(before, after, "rollback", figures=figures, moved=moved)
        return after

    # moving tasks -------------------------------------------------------------------------

    async def sweep(self, state: RolloutState) -> Moved:
        """Move what waits in streams no one routes to any more (the previous version's,
        the unversioned ones) to stable: unstarted entries and delayed retries, each once.
        Run after every change and on every controller tick (an orchestrator may route on
        a snapshot up to a second old)."""
        sources = [v for v in (state.previous, "") if v is not None and v != state.stable]
        entries = delayed = 0
        shards = self.config.agent_settings(state.agent).shards
        bus, keys = self.services.bus, self.services.keys
        for shard in range(shards):
            target = keys.shard(state.agent, shard, state.stable)
            for tier in self.config.tier_names:
                to = StreamRef(target, tier)
                await bus.ensure_group(to, state.agent)
                for source in sources:
                    src = StreamRef(target.of_version(source), tier)
                    moved = await bus.move_unstarted(src, to, state.agent)
                    entries, delayed = entries + moved.entries, delayed + moved.delayed
        if entries or delayed:
            log.info(
                "moved %d unstarted tasks and %d retries of %s to %s",
                entries,
                delayed,
                state.agent,
                state.stable,
                extra={"action": "rollout_moved", "agent": state.agent},
            )
        return Moved(entries, delayed)

    # audit and status ---------------------------------------------------------------------

    async def audit(
        self,
        before: RolloutState,
        after: RolloutState,
        decision: str,
        *,
        figures: dict[str, Any] | None = None,
        moved: Moved | None = None,
    ) -> None:
        event = AuditEvent.of(
            "rollout",
            None,
            agent=after.agent,
            decision=decision,
            by=self.actor,
            reason=after.reason,
            stable=after.stable,
            canary=after.canary or before.canary,
            from_weight=before.weight,
            to_weight=after.weight,
            phase=after.phase,
            figures=figures,
            moved_tasks=None if moved is None else moved.entries,
            moved_retries=None if moved is None else moved.delayed,
        )
        await self.rollouts.audit(after.agent, [event])
        log.info(
            "rollout %s of %s: %s",
            decision,
            after.agent,
            after.reason,
            extra={"action": "rollout_" + decision, "agent": after.agent},
        )

    async def versions(self, state: RolloutState) -> list[VersionStatus]:
        """Live workers and queued work per version (stable, canary, the previous one)."""
        agent = state.agent
        stale_ms = self.config.agent_settings(agent).visibility_timeout_ms
        live = await self.rollouts.live_versions(agent, stale_ms)
        names = list(dict.fromkeys(v for v in (state.stable, state.canary, state.previous) if v))
        out = []
        for version in names:
            queued = pending = delayed = 0
            for shard in range(self.config.agent_settings(agent).shards):
                keys = self.services.keys.shard(agent, shard, version)
                for tier in self.config.tier_names:
                    stats = await self.services.bus.stream_stats(StreamRef(keys, tier), agent)
                    queued, pending = queued + stats.length, pending + stats.pending
                delayed += (await self.services.bus.shard_backlog(keys))[1]
            out.append(VersionStatus(version, live.get(version, 0), queued, pending, delayed))
        return out


def _version(value: str) -> str:
    try:
        return check_version(value)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def check_weight(weight: float) -> None:
    if not 0.0 <= weight <= 1.0:
        raise ConfigError(f"weight {weight} must be between 0 and 1")
