"""MemoryRegistry: the agent registry in one process (versions, intents, instances and
their heartbeats and health checks), read as ``AgentRegistry`` reads Redis."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from deepagents.config.placement import Placement
from deepagents.contract.agent import AgentContract
from deepagents.store.registry import DETAIL_CHARS, FORGET_MS, AgentHealth, DeadInstance


def _ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class _Agent:
    version: str
    intents: list[str]
    beats: dict[str, int] = field(default_factory=dict)  # instance -> last heartbeat ms
    checks: dict[str, bool] = field(default_factory=dict)  # instance -> last health check
    details: dict[str, str] = field(default_factory=dict)  # instance -> why it failed
    reads: dict[str, Placement] = field(default_factory=dict)  # instance -> its placement
    versions: dict[str, str] = field(default_factory=dict)  # instance -> the version it runs


class MemoryRegistry:
    def __init__(self) -> None:
        self._agents: dict[str, _Agent] = {}

    async def register(self, agent: AgentContract, instance: str) -> None:
        known = self._agents.get(agent.name)
        if known is None:
            known = self._agents[agent.name] = _Agent(agent.version, list(agent.intents))
        known.version, known.intents = agent.version, list(agent.intents)
        known.beats[instance] = _ms()
        known.versions[instance] = agent.version

    async def beat(self, agent: AgentContract, instance: str) -> None:
        known = self._agents.get(agent.name)
        if known is not None:
            known.beats[instance] = _ms()
            known.versions[instance] = agent.version

    async def last_beats(self, agent: str) -> dict[str, int]:
        known = self._agents.get(agent)
        return dict(known.beats) if known is not None else {}

    async def deregister(self, agent: AgentContract, instance: str) -> None:
        known = self._agents.get(agent.name)
        if known is not None:
            known.beats.pop(instance, None)
            known.checks.pop(instance, None)
            known.details.pop(instance, None)
            known.reads.pop(instance, None)
            known.versions.pop(instance, None)

    async def record_reads(self, agent: str, instance: str, placement: Placement) -> None:
        known = self._agents.get(agent)
        if known is not None:
            known.reads[instance] = placement

    async def live_reads(
        self, agent: str, *, stale_ms: int, everything: Placement
    ) -> dict[str, Placement]:
        known = self._agents.get(agent)
        if known is None:
            return {}
        now = _ms()
        return {
            i: known.reads.get(i, everything)
            for i, ms in known.beats.items()
            if now - ms <= stale_ms
        }

    async def record_health(self, agent: str, instance: str, ok: bool, detail: str = "") -> None:
        known = self._agents.get(agent)
        if known is not None:
            known.checks[instance] = ok
            known.details[instance] = "" if ok else detail[:DETAIL_CHARS]

    async def health(
        self, names: list[str] | None = None, *, stale_ms: int, forget_ms: int = FORGET_MS
    ) -> dict[str, AgentHealth]:
        now = _ms()
        out: dict[str, AgentHealth] = {}
        for name in sorted(self._agents) if names is None else names:
            known = self._agents.get(name) or _Agent("", [])
            for gone in [i for i, ms in known.beats.items() if now - ms > forget_ms]:
                del known.beats[gone]
                known.reads.pop(gone, None)
            fresh = [i for i, ms in known.beats.items() if now - ms <= stale_ms]
            healthy = [i for i in fresh if known.checks.get(i, False)]
            why = next((known.details[i] for i in fresh if known.details.get(i)), "")
            dead = tuple(
                DeadInstance(i, ms) for i, ms in sorted(known.beats.items()) if i not in fresh
            )
            out[name] = AgentHealth(
                name, len(known.beats), len(fresh), len(healthy), why, None, dead
            )
        return out

    def live_versions(self, agent: str, stale_ms: int) -> dict[str, int]:
        """Instances with a fresh heartbeat, per version (``RedisRollouts.live_versions``)."""
        known = self._agents.get(agent)
        out: dict[str, int] = {}
        if known is None:
            return out
        now = _ms()
        for instance, ms in known.beats.items():
            version = known.versions.get(instance)
            if version is not None and now - ms <= stale_ms:
                out[version] = out.get(version, 0) + 1
        return out

    async def agents(self, *, what: str = "list agents") -> dict[str, dict[str, object]]:
        return {
            name: {"version": a.version, "intents": a.intents, "instances": dict(a.beats)}
            for name, a in sorted(self._agents.items())
        }
