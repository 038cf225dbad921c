"""MemoryRollouts: rollout state and per-version figures in one process, as
``RedisRollouts`` keeps them in Redis (beside a ``MemoryRegistry``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from deepagents.contract.events import AuditEvent
from deepagents.store.memory_registry import MemoryRegistry
from deepagents.store.rollout_state import RolloutState, VersionWindow, window_from_buckets
from deepagents.store.rollouts import bucket_starts
from deepagents.transport.outbox import encode_events


class MemoryRollouts:
    def __init__(self, registry: MemoryRegistry) -> None:
        self.registry = registry
        self._states: dict[str, RolloutState] = {}
        self._stats: dict[tuple[str, str, int], dict[str, int]] = {}
        self.audited: list[bytes] = []

    async def get(self, agent: str) -> RolloutState | None:
        return self._states.get(agent)

    async def ensure(self, initial: RolloutState) -> RolloutState:
        return self._states.setdefault(initial.agent, replace(initial, rev=1))

    async def swap(self, expected: RolloutState, new: RolloutState) -> bool:
        found = self._states.get(new.agent)
        if (found.rev if found is not None else 0) != expected.rev:
            return False
        self._states[new.agent] = replace(new, rev=expected.rev + 1)
        return True

    async def live_versions(self, agent: str, stale_ms: int) -> dict[str, int]:
        return self.registry.live_versions(agent, stale_ms)

    async def record(self, agent: str, version: str, buckets: dict[int, dict[str, int]]) -> None:
        for start, fields in buckets.items():
            held = self._stats.setdefault((agent, version, start), {})
            for name, n in fields.items():
                held[name] = held.get(name, 0) + n

    async def audit(self, agent: str, events: Sequence[AuditEvent]) -> None:
        self.audited.append(encode_events(events))

    async def window(
        self, agent: str, versions: Sequence[str], window_s: float, now_s: float | None = None
    ) -> dict[str, VersionWindow]:
        starts = bucket_starts(time.time() if now_s is None else now_s, window_s)
        return {
            v: window_from_buckets(v, [self._stats.get((agent, v, s), {}) for s in starts])
            for v in versions
        }
