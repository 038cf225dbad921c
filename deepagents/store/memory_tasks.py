"""MemoryTaskStore: the TaskStore's reads and writes over a MemoryBus's state, so callers of
the task records (the orchestrator, the admin views, tests) run without a server."""

from __future__ import annotations

from collections.abc import Sequence

from deepagents.store.tasks import (
    DeadLetterEntry,
    IdempotencyClaim,
    Location,
    dead_letter_entry,
    decode_location,
    encode_location,
)
from deepagents.transport.keys import Keys, ShardKeys
from deepagents.transport.memory import State
from deepagents.transport.states import TERMINAL


class MemoryTaskStore:
    """The same methods as ``TaskStore``, on the records a ``MemoryBus(state)`` writes."""

    def __init__(self, state: State, keys: Keys) -> None:
        self.state = state
        self.keys = keys

    def location_record(self, task_id: str, location: Location) -> tuple[str, str]:
        return self.keys.location(task_id), encode_location(location)

    async def location(self, task_id: str, *, what: str = "lookup") -> Location | None:
        raw = self.state.string(self.keys.location(task_id))
        return None if raw is None else decode_location(raw)

    async def task_fields(self, location: Location, task_id: str) -> dict[str, str]:
        key = self.keys.shard(location.agent, location.shard).task(task_id)
        return dict(self.state.hash(key) or {})

    async def terminal_result(self, agent: str, shard: int, task_id: str) -> bytes | None:
        task = self.state.hash(self.keys.shard(agent, shard).task(task_id)) or {}
        if task.get("state") in TERMINAL and task.get("result"):
            return task["result"].encode()
        return None

    async def claim_idempotency(
        self, claims: Sequence[IdempotencyClaim], ttl_s: int
    ) -> list[tuple[str, str] | None]:
        out: list[tuple[str, str] | None] = []
        for claim in claims:
            key = self.keys.idempotency(claim.key, claim.tenant)
            if self.state.string(key) is None:  # SET NX
                self.state.strings[key] = f"{claim.task_id} {claim.fingerprint}"
                self.state.expire(key, ttl_s)
            owner, _, fingerprint = (self.state.string(key) or "").partition(" ")
            out.append((owner, fingerprint))
        return out

    async def release_idempotency(self, claims: Sequence[IdempotencyClaim]) -> None:
        for claim in claims:
            key = self.keys.idempotency(claim.key, claim.tenant)
            if self.state.string(key) == f"{claim.task_id} {claim.fingerprint}":
                self.state.strings.pop(key, None)

    async def adopt(self, records: Sequence[tuple[str, str]], ttl_s: int) -> None:
        for key, value in records:
            if self.state.string(key) is None:
                self.state.strings[key] = value
                self.state.expire(key, ttl_s)

    def owner_key(self, task_id: str) -> str:
        return self.keys.owner(task_id)

    def owner_record(self, task_id: str, tenant: str) -> tuple[str, str]:
        return self.owner_key(task_id), tenant

    async def owner(self, task_id: str) -> str | None:
        return self.state.string(self.owner_key(task_id))

    async def owners(self, task_ids: Sequence[str]) -> list[str | None]:
        return [self.state.string(self.owner_key(t)) for t in task_ids]

    async def forget_submitted(self, task_ids: Sequence[str]) -> None:
        for task_id in task_ids:
            self.state.strings.pop(self.owner_key(task_id), None)
            self.state.strings.pop(self.keys.location(task_id), None)

    async def expire(self, agent: str, shard: int, task_id: str, ttl_s: int) -> None:
        self.state.expire(self.keys.shard(agent, shard).task(task_id), ttl_s)
        self.state.expire(self.keys.location(task_id), ttl_s)

    async def dead_letters(self, agent: str, keys: ShardKeys, limit: int) -> list[DeadLetterEntry]:
        dlq = self.state.stream(keys.dlq).entries
        return [
            dead_letter_entry(agent, keys.shard, eid.encode(), fields)
            for eid, fields in list(dlq.items())[:limit]
        ]

    async def dead_letter(
        self, agent: str, keys: ShardKeys, entry_id: str
    ) -> DeadLetterEntry | None:
        fields = self.state.stream(keys.dlq).entries.get(entry_id)
        return (
            None
            if fields is None
            else dead_letter_entry(agent, keys.shard, entry_id.encode(), fields)
        )

    async def purge_dead(self, keys: ShardKeys, entry_ids: Sequence[str] | None) -> int:
        dlq = self.state.stream(keys.dlq).entries
        doomed = list(dlq) if entry_ids is None else [i for i in entry_ids if i in dlq]
        for entry_id in doomed:
            del dlq[entry_id]
        return len(doomed)
