"""The MemoryBus's operations for parents waiting on child tasks, step for step as the
Redis scripts ``park_children.lua`` and ``child_ended.lua`` (each finishes before it
awaits, so each is atomic as a script is)."""

from __future__ import annotations

from collections.abc import Sequence

from deepagents.contract.events import AuditEvent
from deepagents.transport.base import (
    ChildEnded,
    ChildWait,
    ParkStatus,
    StreamRef,
    WaitMode,
    now_ms,
)
from deepagents.transport.entries import entry_fields
from deepagents.transport.keys import ShardKeys, wait_member
from deepagents.transport.memory.data import Group, State, Stream
from deepagents.transport.states import TERMINAL, TaskState

# The task hash's fields that only a task waiting for its children has.
CHILD_WAIT_FIELDS = ("awaiting", "wait_mode", "wait_task", "asked_ms", "wait_due_ms", "sweep_ms")


def _field(child_id: str) -> str:
    return f"child:{child_id}"


class MemoryChildren:
    """Mixed into ``MemoryBus`` (its ``state``, ``_group`` and ``_outbox``)."""

    state: State

    def _group(self, stream: StreamRef, group: str) -> tuple[Stream, Group]:
        raise NotImplementedError

    def _outbox(self, keys: ShardKeys, events: Sequence[AuditEvent]) -> None:
        raise NotImplementedError

    def _requeue(self, target: str, task_json: str, task: dict[str, str]) -> None:
        at = str(now_ms())
        fields = entry_fields(
            task_json.encode(), task.get("attempt", "1"), at, task.get("reply", "")
        )
        entry_id = self.state.stream(target).add(fields)
        task.update(state=TaskState.QUEUED, entry=entry_id, enq_ms=at)

    async def park_children(
        self, stream: StreamRef, group: str, consumer: str, item: ChildWait
    ) -> ParkStatus:
        found, held = self._group(stream, group)
        if held.owner(item.entry_id) != consumer:
            return ParkStatus.LOST
        found.ack_delete(group, item.entry_id)
        keys = stream.keys
        task = self.state.hash_for_write(keys.task(item.task_id))
        if task.get("state") == TaskState.DONE:
            return ParkStatus.DUP
        steps = self.state.hash(keys.steps(item.task_id)) or {}
        ended = sum(1 for c in item.awaiting if _field(c) in steps)
        task.update(
            children=" ".join(item.children),
            deliveries="0",
            parked_version=keys.version,
            tier=item.tier,
        )
        at = now_ms()
        if (item.mode is WaitMode.ALL and ended == len(item.awaiting)) or (
            item.mode is WaitMode.ANY and ended > 0
        ):
            self._requeue(keys.stream(item.tier), item.task_json.decode(), task)
            self._outbox(keys, item.events)
            return ParkStatus.READY
        due = at + item.sweep_ms
        if 0 < item.deadline_ms < due:
            due = item.deadline_ms
        task.update(
            state=TaskState.WAITING,
            awaiting=" ".join(item.awaiting),
            wait_mode=item.mode.value,
            wait_task=item.task_json.decode(),
            asked_ms=str(at),
            wait_due_ms=str(item.deadline_ms),
            sweep_ms=str(item.sweep_ms),
        )
        self.state.delayed.setdefault(keys.delayed, {})[wait_member(item.task_id).encode()] = due
        self._outbox(keys, item.events)
        return ParkStatus.OK

    async def child_ended(
        self,
        keys: ShardKeys,
        tiers: Sequence[str],
        parent_id: str,
        child_id: str,
        result_json: bytes,
        events: Sequence[AuditEvent],
    ) -> ChildEnded:
        steps = self.state.hash(keys.steps(parent_id)) or {}
        if _field(child_id) in steps:
            return ChildEnded.DUP
        task = self.state.hash(keys.task(parent_id))
        if task is None or "state" not in task:
            return ChildEnded.MISSING
        if task["state"] in TERMINAL:
            return ChildEnded.ENDED
        steps = self.state.hash_for_write(keys.steps(parent_id))
        steps[_field(child_id)] = result_json.decode()
        self._outbox(keys, events)
        awaiting = task.get("awaiting")
        if task["state"] != TaskState.WAITING or awaiting is None:
            return ChildEnded.RECORDED
        ids = awaiting.split()
        left = sum(1 for c in ids if _field(c) not in steps)
        if child_id not in ids or (task.get("wait_mode") == WaitMode.ALL.value and left > 0):
            return ChildEnded.RECORDED
        self.state.delayed.get(keys.delayed, {}).pop(wait_member(parent_id).encode(), None)
        tier = task.get("tier", "")
        target = keys.stream(tier if tier in tiers else tiers[-1])
        task_json = task.get("wait_task", "")
        for name in CHILD_WAIT_FIELDS:
            task.pop(name, None)
        self._requeue(target, task_json, task)
        return ChildEnded.WOKE

    async def child_results(
        self, keys: ShardKeys, task_id: str, child_ids: Sequence[str]
    ) -> dict[str, bytes]:
        steps = self.state.hash(keys.steps(task_id)) or {}
        return {c: steps[_field(c)].encode() for c in child_ids if _field(c) in steps}

    async def link_child(self, keys: ShardKeys, child_id: str, parent_id: str, depth: int) -> bool:
        task = self.state.hash(keys.task(child_id))
        if not task:
            return False
        task.update(parent_id=parent_id, depth=str(depth))
        return True
