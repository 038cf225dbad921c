"""TaskHandle: await a submitted task's Result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from deepagents.contract.result import Result

if TYPE_CHECKING:
    from deepagents.orchestrator.orchestrator import Orchestrator


@dataclass(frozen=True, slots=True)
class TaskHandle:
    task_id: str
    agent: str
    tier: str
    shard: int
    duplicate: bool  # True: an earlier submit with the same idempotency key won
    _orchestrator: Orchestrator

    async def result(self, timeout: float | None = 30.0) -> Result:
        """The task's Result; raises ResultTimeout if it has not finished in time."""
        return await self._orchestrator.wait_result(self, timeout)

    async def state(self) -> str | None:
        """queued, running, retrying, done, dead, or None when unknown (expired)."""
        return await self._orchestrator.task_state(self.task_id)
