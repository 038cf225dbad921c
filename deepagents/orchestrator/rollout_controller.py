"""The rollout controller: one per fleet (a Redis lease elects it), it compares each
canary with its stable version over a window and promotes, holds or rolls back
(docs/rollouts.md). Its figures come from the per-version counters the workers keep in
Redis, so it needs no Prometheus."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

from deepagents.errors import ConfigError, TransportError
from deepagents.orchestrator.rollout_ops import RolloutOps
from deepagents.orchestrator.rollout_policy import Decision, decide
from deepagents.store.rollout_state import RolloutState, VersionWindow, now_ms
from deepagents.telemetry.metrics import RolloutFleetMetrics

log = logging.getLogger("deepagents.rollout")


class Lease(Protocol):
    owner: str
    ttl_ms: int

    async def hold(self) -> bool: ...

    async def release(self) -> None: ...


class RolloutController:
    def __init__(
        self,
        ops: RolloutOps,
        lease: Lease,
        *,
        interval_s: float = 5.0,
        metrics: RolloutFleetMetrics | None = None,
    ) -> None:
        self.ops, self.lease, self.interval_s, self.metrics = ops, lease, interval_s, metrics
        self.leading = False
        # The last decision audited per agent: a decision is audited when it differs from
        # the one before (a rollback or a promotion always does), not on every tick.
        self._last: dict[str, tuple[str, float]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                try:
                    await self.tick()
                except TransportError as exc:  # the next tick tries again
                    log.warning("rollout tick failed: %s", exc, extra={"action": "rollout_tick"})
                except ConfigError as exc:  # a damaged state: said, and tried again
                    log.error("rollout tick failed: %s", exc, extra={"action": "rollout_tick"})
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.interval_s)
        finally:
            with contextlib.suppress(TransportError):
                await self.lease.release()

    async def tick(self) -> None:
        leading = await self.lease.hold()
        if leading != self.leading:
            log.info(
                "rollout controller %s %s the lease",
                self.lease.owner,
                "took" if leading else "lost",
                extra={"action": "rollout_leader" if leading else "rollout_follower"},
            )
        self.leading = leading
        if self.metrics is not None:
            self.metrics.leader.set(1 if leading else 0)
        if not leading:
            return
        if self.metrics is not None:  # versions no longer in a rollout leave the gauges
            for gauge in (self.metrics.live, self.metrics.samples, self.metrics.error_rate):
                gauge.clear()
            self.metrics.p95.clear()
        for agent in sorted(self.ops.config.rollouts):
            await self.control(agent)

    async def control(self, agent: str) -> Decision | None:
        """One agent's tick: sweep, export, decide and act."""
        ops = self.ops
        config = ops.rollout_config(agent)
        state = await ops.state(agent)
        await ops.sweep(state)
        live = await ops.rollouts.live_versions(
            agent, ops.config.agent_settings(agent).visibility_timeout_ms
        )
        windows = await ops.rollouts.window(agent, state.versions, config.window_s)
        self._export(state, live, windows)
        if state.phase != "canary" or state.canary is None:
            return None
        stable, canary = windows[state.stable], windows[state.canary]
        decision = decide(state, config, stable, canary, now_ms())
        if config.auto:
            await self._act(state, decision)
        await self._audit_once(state, decision, acted=config.auto)
        return decision

    async def _act(self, state: RolloutState, decision: Decision) -> None:
        ops, agent = self.ops, state.agent
        if decision.kind == "rollback":
            await ops.rollback(agent, reason=decision.reason, figures=decision.figures)
        elif decision.kind in ("promote", "complete") and decision.weight is not None:
            await ops.set_weight(
                agent, decision.weight, decision="promote", reason=decision.reason,
                figures=decision.figures,
            )  # fmt: skip
        elif decision.unhealthy_since_ms != state.unhealthy_since_ms:
            # The for_s timer lives in the shared state: a new leader goes on counting.
            since = decision.unhealthy_since_ms
            with contextlib.suppress(ConfigError):
                await ops.change(
                    agent,
                    lambda s: s.change(by=s.by, reason=s.reason, unhealthy_since_ms=since),
                    "unhealthy",
                )
        if self.metrics is not None:
            self.metrics.decisions.labels(agent, decision.kind).inc()

    async def _audit_once(self, state: RolloutState, decision: Decision, *, acted: bool) -> None:
        """Decisions that changed nothing (wait, healthy, slow, unhealthy) are audited
        when they differ from the agent's previous one; the changes audit themselves."""
        key = (decision.kind, state.weight)
        if decision.kind in ("rollback", "promote", "complete") and acted:
            self._last[state.agent] = key
            return
        if self._last.get(state.agent) == key:
            return
        self._last[state.agent] = key
        with contextlib.suppress(TransportError):
            await self.ops.audit(
                state,
                state,
                decision.kind if acted else f"{decision.kind} (auto off)",
                figures={**decision.figures, "reason": decision.reason},
            )

    def _export(
        self, state: RolloutState, live: dict[str, int], windows: dict[str, VersionWindow]
    ) -> None:
        m = self.metrics
        if m is None:
            return
        m.weight.labels(state.agent).set(state.weight)
        for version in state.versions:
            m.live.labels(state.agent, version).set(live.get(version, 0))
            w = windows.get(version)
            if w is not None:
                m.samples.labels(state.agent, version).set(w.samples)
                m.error_rate.labels(state.agent, version).set(w.error_rate)
                if w.p95_ms is not None:
                    m.p95.labels(state.agent, version).set(w.p95_ms / 1000)
