"""The interfaces of the stores, as the layers above use them: ``TaskStore`` and
``AgentRegistry`` implement them on Redis, ``MemoryTaskStore`` and ``MemoryRegistry`` in
one process (beside a ``MemoryBus``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from deepagents.config.placement import Placement
from deepagents.contract.agent import AgentContract
from deepagents.contract.events import AuditEvent
from deepagents.store.registry import FORGET_MS, AgentHealth
from deepagents.store.rollout_state import RolloutState, VersionWindow
from deepagents.store.tasks import DeadLetterEntry, IdempotencyClaim, Location
from deepagents.transport.keys import Keys, ShardKeys


class TaskRecords(Protocol):
    keys: Keys

    def location_record(self, task_id: str, location: Location) -> tuple[str, str]: ...

    async def location(self, task_id: str, *, what: str = "lookup") -> Location | None: ...

    async def task_fields(self, location: Location, task_id: str) -> dict[str, str]: ...

    async def terminal_result(self, agent: str, shard: int, task_id: str) -> bytes | None: ...

    async def claim_idempotency(
        self, claims: Sequence[IdempotencyClaim], ttl_s: int
    ) -> list[tuple[str, str] | None]: ...

    async def release_idempotency(self, claims: Sequence[IdempotencyClaim]) -> None: ...

    async def adopt(self, records: Sequence[tuple[str, str]], ttl_s: int) -> None: ...

    def owner_key(self, task_id: str) -> str: ...

    def owner_record(self, task_id: str, tenant: str) -> tuple[str, str]: ...

    async def owner(self, task_id: str) -> str | None: ...

    async def owners(self, task_ids: Sequence[str]) -> list[str | None]: ...

    async def forget_submitted(self, task_ids: Sequence[str]) -> None: ...

    async def expire(self, agent: str, shard: int, task_id: str, ttl_s: int) -> None: ...

    async def dead_letters(
        self, agent: str, keys: ShardKeys, limit: int
    ) -> list[DeadLetterEntry]: ...

    async def dead_letter(
        self, agent: str, keys: ShardKeys, entry_id: str
    ) -> DeadLetterEntry | None: ...

    async def purge_dead(self, keys: ShardKeys, entry_ids: Sequence[str] | None) -> int: ...


class Answers(Protocol):
    """The last good answer per (agent, cache key), for ``degrade`` (``store/answers.py``)."""

    async def get(self, agent: str, cache_key: str) -> bytes | None: ...

    async def put(self, agent: str, cache_key: str, output_json: bytes, ttl_s: int) -> bool: ...


class Registry(Protocol):
    async def register(self, agent: AgentContract, instance: str) -> None: ...

    async def beat(self, agent: AgentContract, instance: str) -> None: ...

    async def last_beats(self, agent: str) -> dict[str, int]:
        """Each registered instance's last heartbeat (ms since the epoch, its own clock)."""
        ...

    async def deregister(self, agent: AgentContract, instance: str) -> None: ...

    async def record_health(
        self, agent: str, instance: str, ok: bool, detail: str = ""
    ) -> None: ...

    async def record_reads(self, agent: str, instance: str, placement: Placement) -> None: ...

    async def live_reads(
        self, agent: str, *, stale_ms: int, everything: Placement
    ) -> dict[str, Placement]: ...

    async def health(
        self, names: list[str] | None = None, *, stale_ms: int, forget_ms: int = FORGET_MS
    ) -> dict[str, AgentHealth]: ...

    async def agents(self, *, what: str = "list agents") -> dict[str, dict[str, object]]: ...


class Rollouts(Protocol):
    """Rollout state and per-version figures (``RedisRollouts``, ``MemoryRollouts``)."""

    async def get(self, agent: str) -> RolloutState | None: ...

    async def ensure(self, initial: RolloutState) -> RolloutState: ...

    async def swap(self, expected: RolloutState, new: RolloutState) -> bool: ...

    async def live_versions(self, agent: str, stale_ms: int) -> dict[str, int]: ...

    async def record(
        self, agent: str, version: str, buckets: dict[int, dict[str, int]]
    ) -> None: ...

    async def audit(self, agent: str, events: Sequence[AuditEvent]) -> None: ...

    async def window(
        self, agent: str, versions: Sequence[str], window_s: float, now_s: float | None = None
    ) -> dict[str, VersionWindow]: ...
