"""The MemoryBus's operations for tasks waiting on a person, step for step as the Redis
scripts ``park.lua``, ``answer.lua`` and ``wake.lua`` (each finishes before it awaits)."""

from __future__ import annotations

from collections.abc import Sequence

from deepagents.contract.events import AuditEvent
from deepagents.transport.base import (
    Answered,
    AskRecord,
    Park,
    StreamRef,
    Waiting,
    WaitingCursor,
    Woken,
    now_ms,
)
from deepagents.transport.entries import entry_fields
from deepagents.transport.keys import ShardKeys, wait_member
from deepagents.transport.memory.data import Group, State, Stream
from deepagents.transport.questions import decode_question, encode_question, task_of, tenant_of
from deepagents.transport.states import AnswerStatus, Outcome, TaskState, WakeStatus

# The task hash's fields that only a waiting task has.
WAIT_FIELDS = ("on_timeout", "asked_ms", "wait_due_ms")


def drop_wait(state: State, keys: ShardKeys, task_id: str) -> None:
    """Take a task out of its shard's delayed set and waiting index; drop its question."""
    state.delayed.get(keys.delayed, {}).pop(wait_member(task_id).encode(), None)
    state.delayed.get(keys.waiting, {}).pop(task_id.encode(), None)
    state.strings.pop(keys.question(task_id), None)


class MemoryWaiting:
    """Mixed into ``MemoryBus`` (its ``state``, ``_group`` and ``_outbox``)."""

    state: State

    def _group(self, stream: StreamRef, group: str) -> tuple[Stream, Group]:
        raise NotImplementedError

    def _outbox(self, keys: ShardKeys, events: Sequence[AuditEvent]) -> None:
        raise NotImplementedError

    async def park(self, stream: StreamRef, group: str, consumer: str, item: Park) -> Outcome:
        found, held = self._group(stream, group)
        if held.owner(item.entry_id) != consumer:
            return Outcome.LOST
        found.ack_delete(group, item.entry_id)
        keys = stream.keys
        task = self.state.hash_for_write(keys.task(item.task_id))
        if task.get("state") == TaskState.DONE:
            return Outcome.DUP
        at = now_ms()
        task.update(
            state=TaskState.WAITING,
            tier=item.tier,
            ask=item.ask,
            on_timeout=item.on_timeout,
            asked_ms=str(at),
            wait_due_ms=str(item.due_ms),
            deliveries="0",
            parked_version=keys.version,
        )
        record = encode_question(item.task_json, item.question, item.schema_json, item.default_json)
        self.state.strings[keys.question(item.task_id)] = record.decode()
        self.state.delayed.setdefault(keys.delayed, {})[wait_member(item.task_id).encode()] = (
            item.due_ms
        )
        index = self.state.delayed.setdefault(keys.waiting, {})
        tenant = tenant_of(item.task_json)
        if tenant is not None:  # as park.lua: drop the oldest three gone members, then add
            mine = self.state.delayed.setdefault(keys.tenant_waiting(tenant), {})
            for member in sorted(mine, key=lambda m: (mine[m], m))[:3]:
                if member not in index:
                    del mine[member]
            mine[item.task_id.encode()] = at
        index[item.task_id.encode()] = at
        self._outbox(keys, item.events)
        return Outcome.OK

    def _resume(
        self, keys: ShardKeys, tiers: Sequence[str], task_id: str, task: dict[str, str]
    ) -> int:
        """Re-enqueue a waiting task on its tier; the time it asked (ms)."""
        record = (self.state.string(keys.question(task_id)) or "").encode()
        drop_wait(self.state, keys, task_id)
        at = str(now_ms())
        tier = task.get("tier", "")
        target = keys.stream(tier if tier in tiers else tiers[-1])
        fields = entry_fields(task_of(record), task.get("attempt", "1"), at, task.get("reply", ""))
        entry_id = self.state.stream(target).add(fields)
        asked = int(task.get("asked_ms") or 0)
        for name in WAIT_FIELDS:
            task.pop(name, None)
        task.update(state=TaskState.QUEUED, entry=entry_id, enq_ms=at)
        return asked

    async def answer(
        self,
        keys: ShardKeys,
        tiers: Sequence[str],
        task_id: str,
        ask: str,
        answer_json: bytes,
        events: Sequence[AuditEvent],
    ) -> Answered:
        task = self.state.hash(keys.task(task_id))
        if task is None or "state" not in task:
            return Answered(AnswerStatus.MISSING)
        if task["state"] != TaskState.WAITING or task.get("ask") != ask:
            steps = self.state.hash(keys.steps(task_id)) or {}
            if ask and f"ask:{ask}" in steps:
                return Answered(AnswerStatus.ALREADY_REPLIED, task["state"])
            return Answered(AnswerStatus.NOT_WAITING, task["state"])
        self.state.hash_for_write(keys.steps(task_id))[f"ask:{ask}"] = answer_json.decode()
        asked = self._resume(keys, tiers, task_id, task)
        self._outbox(keys, events)
        return Answered(AnswerStatus.OK, TaskState.QUEUED, asked)

    async def wake(
        self, keys: ShardKeys, tiers: Sequence[str], task_id: str, events: Sequence[AuditEvent]
    ) -> Woken:
        delayed = self.state.delayed.get(keys.delayed, {})
        if delayed.pop(wait_member(task_id).encode(), None) is None:
            return Woken(WakeStatus.GONE)
        task = self.state.hash(keys.task(task_id))
        if task is None or task.get("state") != TaskState.WAITING:
            return Woken(WakeStatus.STALE)
        if "awaiting" in task:  # a wait for child tasks (as wake.lua)
            return self._sweep(keys, tiers, task_id, task, delayed)
        steps = self.state.hash_for_write(keys.steps(task_id))
        field = f"ask:{task.get('ask', '')}:timeouts"
        steps[field] = str(int(steps.get(field, "0")) + 1)
        asked = self._resume(keys, tiers, task_id, task)
        self._outbox(keys, events)
        return Woken(WakeStatus.OK, asked)

    def _sweep(
        self,
        keys: ShardKeys,
        tiers: Sequence[str],
        task_id: str,
        task: dict[str, str],
        delayed: dict[bytes, int],
    ) -> Woken:
        """Before its deadline: move the wait on by its sweep interval and name the children
        it awaits; after it, re-enqueue it (that delivery fails it ``deadline_exceeded``)."""
        now, deadline = now_ms(), int(task.get("wait_due_ms") or 0)
        if deadline == 0 or now < deadline:
            due = now + int(task.get("sweep_ms") or 30_000)
            delayed[wait_member(task_id).encode()] = min(due, deadline) if deadline else due
            return Woken(WakeStatus.SWEEP, 0, tuple(task["awaiting"].split()))
        record = task.pop("wait_task", "")
        for name in ("awaiting", "wait_mode", "sweep_ms"):
            task.pop(name, None)
        self.state.strings[keys.question(task_id)] = record + "\n{}"
        self._resume(keys, tiers, task_id, task)
        return Woken(WakeStatus.OK)

    async def ask_record(self, keys: ShardKeys, task_id: str, ask: str) -> AskRecord:
        steps = self.state.hash(keys.steps(task_id)) or {}
        answer = steps.get(f"ask:{ask}")
        return AskRecord(
            None if answer is None else answer.encode(),
            int(steps.get(f"ask:{ask}:timeouts", "0")),
        )

    async def waiting(
        self, keys: ShardKeys, limit: int, tenant: str | None = None
    ) -> list[Waiting]:
        return await self.waiting_of(keys, await self.waiting_ids(keys, limit, tenant))

    async def waiting_ids(
        self,
        keys: ShardKeys,
        limit: int,
        tenant: str | None = None,
        *,
        after: WaitingCursor | None = None,
        newest: bool = False,
    ) -> list[tuple[str, float]]:
        index = self.state.delayed.get(keys.waiting, {})
        listed = index
        if tenant is not None:  # as tenant_waiting.lua: its own index, gone members dropped
            listed = self.state.delayed.get(keys.tenant_waiting(tenant), {})
            for member in [m for m in listed if m not in index]:
                del listed[member]
        ordered = sorted(listed.items(), key=lambda kv: (kv[1], kv[0]), reverse=newest)
        if after is not None:
            at = (float(after.asked_ms), after.task_id.encode())
            ordered = [(m, s) for m, s in ordered if ((s, m) < at if newest else (s, m) > at)]
        return [(member.decode(), asked) for member, asked in ordered[:limit]]

    async def waiting_of(self, keys: ShardKeys, ids: Sequence[tuple[str, float]]) -> list[Waiting]:
        out = []
        for task_id, asked in ids:
            task = self.state.hash(keys.task(task_id)) or {}
            asked_for = await self.asked(keys, task_id)
            if "ask" not in task or not asked_for:
                continue
            out.append(
                Waiting(
                    task_id,
                    keys.agent,
                    keys.shard,
                    int(asked),
                    task["ask"],
                    asked_for["question"],
                    int(task.get("wait_due_ms") or 0),
                    task.get("on_timeout", ""),
                )
            )
        return out

    async def asked(self, keys: ShardKeys, task_id: str) -> dict[str, str]:
        record = self.state.string(keys.question(task_id))
        return decode_question(None if record is None else record.encode())

    async def waiting_count(
        self, shards: Sequence[ShardKeys], tenant: str | None = None
    ) -> list[int]:
        return [
            len(
                self.state.delayed.get(
                    keys.waiting if tenant is None else keys.tenant_waiting(tenant), {}
                )
            )
            for keys in shards
        ]
