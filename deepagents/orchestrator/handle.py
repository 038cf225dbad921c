"""TaskHandle: await a submitted task's Result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from deepagents.contract.result import Result


class ResultSource(Protocol):
    """What a handle asks of the orchestrator that submitted its task."""

    async def wait_result(self, handle: TaskHandle, timeout: float | None) -> Result: ...

    async def task_state(self, task_id: str) -> str | None: ...


@dataclass(frozen=True, slots=True)
class TaskHandle:
    task_id: str
    agent: str
    tier: str
    shard: int
    duplicate: bool  # True: an earlier submit with the same idempotency key won
    _orchestrator: ResultSource
    # Said at submit when no live worker serves its agent (``unserved.py``): it waits.
    warning: str | None = None

    async def result(self, timeout: float | None = 30.0) -> Result:
        """The task's Result; raises ResultTimeout if it has not finished in time."""
        return await self._orchestrator.wait_result(self, timeout)

    async def state(self) -> str | None:
        """queued, scheduled (not before its time), running, retrying, waiting (for a reply),
        done, dead, or None when unknown (expired)."""
        return await self._orchestrator.task_state(self.task_id)
