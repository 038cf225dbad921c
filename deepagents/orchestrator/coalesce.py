"""Concurrent ``Orchestrator.submit`` calls of one process share one enqueue script call.

A submit's cost is mostly its round trip. Concurrent calls for the same agent type queue
while one ``submit_many`` is on the wire and go together in the next (the process's one
group-commit mechanism, ``_internal/group_commit.py``): alone, a task is submitted at
once; under load, one script call serves many. Every caller gets the outcome it would
have had alone:

- enqueued: its own handle (tasks keep their ids, so handles map back by id);
- refused for backlog: ``Overloaded`` for its own task alone (1 task refused);
- a task of the batch is refused (``SubmitError``: a payload its agent rejects, a past
  deadline): nothing was enqueued (``submit_many`` checks all first), so each task is
  submitted again on its own and gets its own answer;
- an error that is not a ``DeepAgentsError`` (a task the codec cannot encode, say): one
  task may be its cause, and the batch may mix tenants (the gateway), so each task is
  submitted again on its own too: one tenant's bad task never fails another's request;
- written but not confirmed by enough replicas: each caller hears of its own task alone;
- Redis failed: every caller gets that error, as each would have.

Not coalesced (submitted alone): tasks with an ``idempotency_key`` (the SET NX may give
them another task's id), intents no agent serves, and everything while a tracer records
(each task's PRODUCER span must start in its own caller's context). Batches stay within
one agent type, because ``submit_many`` refuses a batch's tasks per agent type's backlog.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from typing import Protocol

from deepagents._internal.group_commit import GroupCommit
from deepagents.contract.task import Task
from deepagents.errors import DeepAgentsError, NotReplicated, Overloaded, SubmitError
from deepagents.orchestrator.handle import BacklogRefused, TaskHandle
from deepagents.orchestrator.routing import Route, Router


class BatchSubmitter(Protocol):
    """What the coalescer needs of the submit path (``submit.py``'s ``Submitter``)."""

    @property
    def router(self) -> Router: ...

    @property
    def tracing(self) -> bool:
        """Whether a tracer records: each task's span must start in its caller's context."""
        ...

    async def submit_many(
        self, tasks: Sequence[Task], *, recorded: Collection[str] = ()
    ) -> list[TaskHandle]: ...

    def overloaded(
        self, route: Route, refused: int, accepted: list[TaskHandle]
    ) -> BacklogRefused: ...


# A task, and whether its caller wrote its location record (``submit_many(recorded=)``).
_Item = tuple[Task, bool]
_Outcome = TaskHandle | BaseException


class SubmitCoalescer:
    def __init__(self, submitter: BatchSubmitter) -> None:
        self.submitter = submitter
        self._groups: dict[str, GroupCommit[_Item, TaskHandle]] = {}

    async def submit(self, task: Task, *, recorded: bool = False) -> TaskHandle:
        spec = self.submitter.router.by_intent.get(task.intent)
        if spec is None or task.idempotency_key or self.submitter.tracing:
            return await self._alone((task, recorded))
        group = self._groups.get(spec.name)
        if group is None:
            group = self._groups[spec.name] = GroupCommit(self._send, name=f"submit-{spec.name}")
        return await group((task, recorded))

    async def _alone(self, item: _Item) -> TaskHandle:
        task, recorded = item
        (handle,) = await self.submitter.submit_many(
            [task], recorded=[task.task_id] if recorded else ()
        )
        return handle

    async def _send(self, batch: list[_Item]) -> list[_Outcome]:
        tasks = [task for task, _ in batch]
        try:
            handles = await self.submitter.submit_many(
                tasks, recorded=[task.task_id for task, recorded in batch if recorded]
            )
        except Exception as exc:
            return await self._failed(batch, exc)
        return list(handles)

    async def _failed(self, batch: list[_Item], exc: Exception) -> list[_Outcome]:
        """Each caller's outcome when the group's ``submit_many`` raised ``exc``."""
        if isinstance(exc, Overloaded):
            kept = exc.accepted if isinstance(exc, BacklogRefused) else []
            accepted = {h.task_id: h for h in kept}
            return [accepted.get(t.task_id) or self._backlog_refusal(t) for t, _ in batch]
        if isinstance(exc, NotReplicated):
            # Written, not yet replicated: each caller hears of its own task alone (the
            # batch may mix tenants, whose task ids are not each other's to see). A task
            # that was not written was refused for its stream's backlog.
            return [
                exc.only({t.task_id}) if t.task_id in exc.task_ids else self._backlog_refusal(t)
                for t, _ in batch
            ]
        if len(batch) > 1 and (
            isinstance(exc, SubmitError) or not isinstance(exc, DeepAgentsError)
        ):
            # Refused before anything was enqueued, or unforeseen (so possibly one task's
            # doing): each task answers for itself.
            return await self._each_alone(batch)
        return [exc] * len(batch)  # Redis failed: each caller would have met it alone

    def _backlog_refusal(self, task: Task) -> Overloaded:
        """A task of the batch that its stream's backlog kept out: its own refusal."""
        route = self.submitter.router.route(task)
        return self.submitter.overloaded(route, 1, [])

    async def _each_alone(self, batch: Sequence[_Item]) -> list[_Outcome]:
        return list(
            await asyncio.gather(*(self._alone(item) for item in batch), return_exceptions=True)
        )
