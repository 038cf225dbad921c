"""One sample of Redis for the fleet-level gauges: per stream backlog, pending, lag,
oldest pending age and live readers; per shard dead letters and delayed retries; per agent
audit outbox backlog and instance health. Run by ``deepagents exporter`` only (one copy for
the fleet).

It reads through the operator views (``Admin``), so it sits in the scheduling layer; the
gauges it sets are defined in ``telemetry.metrics``.
"""

from __future__ import annotations

import time
from typing import Any

from deepagents.compose import Services
from deepagents.config.schema import FileConfig
from deepagents.orchestrator.admin import Admin
from deepagents.orchestrator.coverage import coverage
from deepagents.store.webhooks import WebhookQueue
from deepagents.telemetry.metrics import FleetMetrics

# Pending entries looked at per stream and sample: pools bound what a worker holds, so a
# fleet's pending entries per stream are far fewer; the scan stays cheap at a 5 s interval.
PEL_SCAN = 10_000


class FleetSampler:
    def __init__(self, services: Services, config: FileConfig, metrics: FleetMetrics) -> None:
        self.config = config
        self.admin = Admin(services.bus, services.tasks, config)
        self.registry = services.registry
        self.metrics = metrics
        client = services.client
        self.webhooks = (
            WebhookQueue(client, services.keys) if client is not None and config.webhooks else None
        )
        for name, tier in config.tiers.items():
            metrics.max_wait.labels(name).set(tier.max_wait_ms / 1000)
        for name, model in config.models.items():
            if model.limits.daily_budget_usd is not None:
                metrics.model_budget.labels(name).set(model.limits.daily_budget_usd)

    async def sample(self) -> None:
        started = time.perf_counter()
        rows = await self.admin.status()
        await self._oldest_idle(rows)
        self._streams(rows)
        await self._outbox()
        await self._waiting()
        await self._health()
        await self._readers()
        await self._webhooks()
        self.metrics.sample_seconds.set(time.perf_counter() - started)

    async def _oldest_idle(self, rows: list[dict[str, Any]]) -> None:
        """The longest idle time among each stream's pending entries (up to ``PEL_SCAN`` of
        them). ``status`` reports the first entry by id, which a live worker may keep young
        while a dead one's entries further on grow old: the gauge must see those."""
        busy = [r for r in rows if r["pending"]]
        if not busy:
            return
        idles = await self.admin.bus.oldest_idle_ms(
            [(r["stream"], r["agent"]) for r in busy], PEL_SCAN
        )
        for r, idle in zip(busy, idles, strict=True):
            if idle is not None:
                r["oldest_pending_ms"] = max(r["oldest_pending_ms"], idle)

    def _streams(self, rows: list[dict[str, Any]]) -> None:
        m = self.metrics
        for r in rows:
            labels = (r["stream"], r["agent"], r["agent"], r["tier"], str(r["shard"]))
            m.length.labels(*labels).set(r["length"])
            m.fair_queue.labels(*labels).set(r["fair"])
            m.pending.labels(*labels).set(r["pending"])
            m.oldest_pending.labels(*labels).set(r["oldest_pending_ms"] / 1000)
            # Redis < 7 has no lag in XINFO GROUPS: the unread length is the closest figure.
            lag = r["lag"] if r["lag"] is not None else max(0, r["length"] - r["pending"])
            m.lag.labels(*labels).set(lag)
            shard = (r["agent"], str(r["shard"]))
            m.dead_letters.labels(*shard).set(r["dead_letters"])
            m.delayed.labels(*shard).set(r["delayed"])

    async def _outbox(self) -> None:
        """Acked outbox entries are deleted, so the streams' lengths are the backlog."""
        shards = self.admin.shards()
        lengths = await self.admin.bus.outbox_lengths([keys for _, keys in shards])
        per_agent: dict[str, int] = dict.fromkeys(self.admin.agents, 0)
        for (agent, _), length in zip(shards, lengths, strict=True):
            per_agent[agent] += length
        for agent, total in per_agent.items():
            self.metrics.audit_backlog.labels(agent).set(total)

    async def _webhooks(self) -> None:
        """Each endpoint's backlog, and how long it has been failing (a dead endpoint)."""
        if self.webhooks is None:
            return
        for status in await self.webhooks.statuses(self.config.webhooks):
            self.metrics.webhook_backlog.labels(status.endpoint).set(status.backlog)
            self.metrics.webhook_failing.labels(status.endpoint).set(status.failing_s())

    async def _readers(self) -> None:
        for agent in self.admin.agents:
            covered = await coverage(self.registry, self.config, agent)
            for (tier, shard), n in covered.readers.items():
                self.metrics.readers.labels(agent, tier, str(shard)).set(n)

    async def _waiting(self) -> None:
        """Open questions per shard, from the waiting index the scripts keep."""
        shards = self.admin.shards()
        counts = await self.admin.bus.waiting_count([keys for _, keys in shards])
        for (agent, keys), n in zip(shards, counts, strict=True):
            self.metrics.waiting.labels(agent, str(keys.shard)).set(n)

    async def _health(self) -> None:
        m = self.metrics
        for agent in self.admin.agents:
            # An instance is live while its registry heartbeat (every liveness_ms) is
            # younger than dead_after_ms: the verdict the workers reclaim on.
            stale_ms = self.config.agent_settings(agent).dead_after_ms
            health = (await self.registry.health([agent], stale_ms=stale_ms))[agent]
            m.instances.labels(agent).set(health.instances)
            m.live_instances.labels(agent).set(health.fresh)
            m.instances_healthy.labels(agent).set(health.healthy)
            m.health_ratio.labels(agent).set(health.ratio)
