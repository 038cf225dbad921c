"""The orchestrator's side of delegation (``ctx.delegate``, worker/delegation.py): submit a
child and link it to its parent, carry a child's end to its parent's shard, cancel the
children of a cancelled parent. The decisions are the bus's scripts on each task's slot."""

from __future__ import annotations

from collections.abc import Sequence

from deepagents.contract.event_sink import EventSink
from deepagents.contract.events import AuditEvent
from deepagents.contract.result import Result
from deepagents.contract.task import Task
from deepagents.store.base import TaskRecords
from deepagents.transport.base import ChildEnded, ChildWaits
from deepagents.transport.keys import Keys, parked_version


class Children:
    def __init__(
        self, bus: ChildWaits, tasks: TaskRecords, keys: Keys, *, events: EventSink
    ) -> None:
        self.bus, self.tasks, self.keys, self.events = bus, tasks, keys, events

    async def link(self, child: Task, agent: str, shard: int) -> None:
        """Name the parent on the child's task hash (for ``lookup``): a listing aid, not a
        decision; the child's own task carries ``parent_id`` for everything else."""
        assert child.parent_id is not None
        await self.bus.link_child(
            self.keys.shard(agent, shard), child.task_id, child.parent_id, child.depth or 1
        )

    async def ended(
        self, parent_id: str, child_id: str, result_json: bytes, tiers: Sequence[str]
    ) -> ChildEnded:
        """Record a child's end on its parent's slot, which wakes the parent when it was
        the one it waited for (``child_ended``: once per child)."""
        loc = await self.tasks.location(parent_id, what="deliver a child's end")
        info = {} if loc is None else await self.tasks.task_fields(loc, parent_id)
        if loc is None or not info:
            return ChildEnded.MISSING
        # Under a rollout the parent resumes on the streams it was parked from.
        keys = self.keys.shard(loc.agent, loc.shard, parked_version(info))
        events = []
        if self.events.wanted:  # the child's status: its result decoded
            status = Result.model_validate_json(result_json).status
            events.append(
                AuditEvent.of(
                    "child_ended", parent_id, agent=loc.agent, child_id=child_id, status=status
                )
            )
        return await self.bus.child_ended(keys, tiers, parent_id, child_id, result_json, events)


def children_of(info: dict[str, str]) -> list[str]:
    """The ids of the children a task delegated to, from its task hash."""
    return (info.get("children") or "").split()
