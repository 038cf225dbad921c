"""What the orchestrator tells about one task, found through its location record: its task
hash, state, result, and the question it waits on."""

from __future__ import annotations

from typing import Any

from deepagents.contract.codec import decode_result
from deepagents.contract.result import Result
from deepagents.orchestrator.replies import Question, question_of
from deepagents.store.base import TaskRecords
from deepagents.transport.base import MessageBus
from deepagents.transport.keys import Keys


class TaskQueries:
    def __init__(self, bus: MessageBus, tasks: TaskRecords, keys: Keys) -> None:
        self.bus, self.tasks, self.keys = bus, tasks, keys

    async def lookup(self, task_id: str) -> dict[str, Any] | None:
        """The task hash (state, owner, attempt, result, …) found through its location key."""
        loc = await self.tasks.location(task_id)
        if loc is None:
            return None
        info: dict[str, Any] = dict(await self.tasks.task_fields(loc, task_id))
        info.update(agent=loc.agent, shard=loc.shard, submitted_tier=loc.tier)
        if info.get("state") == "waiting":  # its question is kept beside the task hash
            info.update(await self.bus.asked(self.keys.shard(loc.agent, loc.shard), task_id))
        return info

    async def result(self, task_id: str) -> Result | None:
        info = await self.lookup(task_id)
        if info is None or not info.get("result"):
            return None
        return decode_result(info["result"])

    async def state(self, task_id: str) -> str | None:
        info = await self.lookup(task_id)
        return None if info is None else str(info.get("state") or "") or None

    async def question(self, task_id: str) -> Question | None:
        info = await self.lookup(task_id)
        return None if info is None else question_of(info)
