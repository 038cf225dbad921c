"""Group commit for single-task submits: concurrent ``POST /v1/tasks`` share one enqueue.

After admission, the orchestrator's enqueue pipeline is the gateway's last per-request
round trip on the submit path. Concurrent requests for the same agent type queue here
while one ``submit_many`` is on the wire and go together in the next: alone, a request is
submitted at once (no timer); under load, one pipeline serves many. Every caller gets the
outcome it would have had alone:

- enqueued: its own handle (tasks keep their ids, so handles map back by id);
- refused for backlog: ``Overloaded`` for its own task alone (1 task refused);
- a task of the batch fails validation: nothing was enqueued (``submit_many`` validates
  all first), so each task is submitted again on its own and gets its own answer;
- an error that is not a ``DeepAgentsError`` (a task the codec cannot encode, say): one
  task may be its cause, and the batch mixes tenants, so each task is submitted again on
  its own too: one tenant's bad task never fails another tenant's request;
- Redis failed: every caller gets that error, as each would have.

Not coalesced (submitted alone, as before): tasks with an ``idempotency_key`` (the
SET NX may give them another task's id), intents no agent serves, and everything while a
tracer records (each task's PRODUCER span must start in its own request's context).
Batches stay within one agent type, because ``submit_many`` checks a batch's backlog
against the smallest ``max_backlog`` among its agents.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from deepagents.contract.task import Task
from deepagents.errors import DeepAgentsError, NotReplicated, Overloaded, SubmitError
from deepagents.orchestrator import Orchestrator, TaskHandle

_Waiter = tuple[Task, "asyncio.Future[TaskHandle]"]


class SubmitCoalescer:
    def __init__(self, orchestrator: Orchestrator) -> None:
        self.orchestrator = orchestrator
        self._queues: dict[str, list[_Waiter]] = {}
        self._flushers: dict[str, asyncio.Task[None]] = {}

    async def submit(self, task: Task) -> TaskHandle:
        """Enqueue one task whose location record the caller has written (as
        ``submit_many(..., recorded=[task.task_id])``)."""
        orchestrator = self.orchestrator
        spec = orchestrator.router.by_intent.get(task.intent)
        if spec is None or task.idempotency_key or orchestrator.telemetry.tracing.recording:
            return await self._alone(task)
        future: asyncio.Future[TaskHandle] = asyncio.get_running_loop().create_future()
        self._queues.setdefault(spec.name, []).append((task, future))
        if spec.name not in self._flushers:
            self._flushers[spec.name] = asyncio.create_task(
                self._flush(spec.name), name=f"gateway-submit-{spec.name}"
            )
        return await future

    async def _alone(self, task: Task) -> TaskHandle:
        (handle,) = await self.orchestrator.submit_many([task], recorded=[task.task_id])
        return handle

    async def _flush(self, agent: str) -> None:
        try:
            while batch := self._queues.pop(agent, None):
                await self._send([w for w in batch if not w[1].done()])
        finally:
            del self._flushers[agent]

    async def _send(self, batch: Sequence[_Waiter]) -> None:
        if not batch:
            return
        tasks = [task for task, _ in batch]
        try:
            handles = await self.orchestrator.submit_many(
                tasks, recorded=[t.task_id for t in tasks]
            )
        except BaseException as exc:
            await self._failed(batch, exc)
            if not isinstance(exc, Exception):
                raise
        else:
            for (_, future), handle in zip(batch, handles, strict=True):
                _resolve(future, handle)

    async def _failed(self, batch: Sequence[_Waiter], exc: BaseException) -> None:
        """Each caller's outcome when the group's ``submit_many`` raised ``exc``."""
        if isinstance(exc, Overloaded):
            self._overloaded(batch, exc)
        elif isinstance(exc, NotReplicated):
            # Written, not yet replicated: each caller hears of its own task alone (the
            # batch mixes tenants, and another tenant's task ids are not theirs to see). A
            # task that was not written was refused for its stream's backlog.
            for task, future in batch:
                if task.task_id in exc.task_ids:
                    _fail(future, exc.only({task.task_id}))
                else:
                    self._refuse_for_backlog(task, future)
        elif isinstance(exc, SubmitError) or (
            # Unforeseen, so possibly caused by one task: each answers for itself.
            isinstance(exc, Exception) and not isinstance(exc, DeepAgentsError) and len(batch) > 1
        ):
            # A refusal comes before anything is enqueued: each task answers for itself.
            await self._each_alone(batch)
        else:  # Redis failed (each caller would have met it alone), or cancelled
            for _, future in batch:
                _fail(future, exc)

    def _overloaded(self, batch: Sequence[_Waiter], exc: Overloaded) -> None:
        """Each caller gets its own handle if its task got in, else its own refusal."""
        accepted = {h.task_id: h for h in getattr(exc, "accepted", [])}
        for task, future in batch:
            handle = accepted.get(task.task_id)
            if handle is not None:
                _resolve(future, handle)
            else:
                self._refuse_for_backlog(task, future)

    def _refuse_for_backlog(self, task: Task, future: asyncio.Future[TaskHandle]) -> None:
        """A task of the batch that its stream's backlog kept out: its own refusal."""
        route = self.orchestrator.router.route(task)
        _fail(future, self.orchestrator.overloaded(route, 1, []))

    async def _each_alone(self, batch: Sequence[_Waiter]) -> None:
        await asyncio.gather(*(self._one(task, future) for task, future in batch))

    async def _one(self, task: Task, future: asyncio.Future[TaskHandle]) -> None:
        try:
            handle = await self._alone(task)
        except Exception as exc:
            _fail(future, exc)
        else:
            _resolve(future, handle)


def _resolve(future: asyncio.Future[TaskHandle], handle: TaskHandle) -> None:
    if not future.done():  # a caller that went away (client disconnect) is skipped
        future.set_result(handle)


def _fail(future: asyncio.Future[TaskHandle], exc: BaseException) -> None:
    if future.done():
        return
    if isinstance(exc, Exception):
        future.set_exception(exc)
    else:
        future.cancel()
