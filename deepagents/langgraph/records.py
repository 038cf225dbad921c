"""Where a thread's checkpoint records live: the fields of one thread, by name.

Inside a task the thread is the task (``thread_id == task_id``) and its records are the
task's own (``TaskContext.save_records``): written owner-checked like a step, batched with
the other deliveries' records, read once per delivery. Outside a task (tests, tools that
read a finished thread) a ``ThreadStore`` from ``deepagents.store.graph_threads`` serves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from deepagents.contract.context import TaskContext
from deepagents.errors import StepError

KIND = "lg"


class ThreadRecords(Protocol):
    async def load(self, thread_id: str) -> dict[str, bytes]:
        """Every field of the thread ({} when it has none); the caller does not change it."""
        ...

    async def save(self, thread_id: str, fields: Sequence[tuple[str, bytes]]) -> None: ...

    async def delete(self, thread_id: str) -> None: ...

    async def threads(self) -> list[str]:
        """The threads that have records (``list`` without a thread)."""
        ...


class TaskRecords:
    """The running task's records: the one thread a task's graph may touch is the task."""

    def __init__(self, ctx: TaskContext) -> None:
        self.ctx = ctx
        # Read once per delivery, then kept up to date here: this delivery is the thread's
        # one writer (the owner check refuses any other), and a put_writes looks up what
        # is already there at every step.
        self._fields: dict[str, bytes] | None = None

    def _check(self, thread_id: str) -> None:
        if thread_id != self.ctx.task_id:
            raise StepError(
                f"a graph run by task {self.ctx.task_id} checkpoints its own thread only "
                f"(thread_id = task id), not {thread_id!r}"
            )

    async def load(self, thread_id: str) -> dict[str, bytes]:
        self._check(thread_id)
        if self._fields is None:
            self._fields = await self.ctx.load_records(KIND)
        return self._fields

    async def save(self, thread_id: str, fields: Sequence[tuple[str, bytes]]) -> None:
        self._check(thread_id)
        await self.ctx.save_records(KIND, fields)
        if self._fields is not None:
            self._fields.update(fields)

    async def delete(self, thread_id: str) -> None:
        # The task's records expire with its result; a running task cannot drop them.
        raise StepError("a running task's checkpoints expire with its result: not deleted")

    async def threads(self) -> list[str]:
        return [self.ctx.task_id]
