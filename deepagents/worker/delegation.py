"""``ctx.delegate``: a running task hands work to child tasks and parks until they end.

A child is a full task (routed, tiered, sharded, audited) with ``parent_id``; its id is
derived from the parent's id and the delegation's step id (``child_id``), so a parent that
runs again (a crash, a wake-up) submits the same child, which the enqueue finds there and
leaves alone. The parent parks as it does for a person's reply (``asking.py``): the park
script (``park_children``, owner-checked on the parent's slot) makes it ``waiting`` with
the ids it awaits, holding no entry and no slot. A child's end is recorded on the parent's
slot (``child_ended``: once per child) by the child's worker after its commit landed; the
record of the last child awaited re-enqueues the parent, once. A crash between the two
is repaired by the parent shard's delayed pump: the wait's member comes due every
``delegation.sweep_s``, and ``sweep`` looks each awaited child up and sends its end again
(docs/design.md, "Delegation").

With ``limit=K`` at most K children are in flight: the parent submits the first K that
have not ended, waits for any of them, and on waking submits the next ones.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import ValidationError

from deepagents.contract.codec import encode_result
from deepagents.contract.context import Delegation
from deepagents.contract.result import Result
from deepagents.contract.task import Task
from deepagents.errors import ConfigError, DelegationTooDeep, InvalidInput, TransportError
from deepagents.modelcall.usage import current_usage
from deepagents.transport.base import ChildEnded, ChildWaits, WaitMode
from deepagents.transport.keys import ShardKeys
from deepagents.worker.asking import Parked

log = logging.getLogger("deepagents.worker")
# The namespace of child ids: uuid5(namespace, "<parent id>/<step id>").
CHILD_NAMESPACE = uuid.UUID("5b0f5d1e-4b7a-4f53-9a43-0d5c3a8e6c21")


def child_id(parent_id: str, step_id: str) -> str:
    """The id of the child a delegation step submits: UUID-shaped, the same on every run."""
    return str(uuid.uuid5(CHILD_NAMESPACE, f"{parent_id}/{step_id}"))


class Parentage(Protocol):
    """What a worker needs of an orchestrator to delegate (``Orchestrator`` has these)."""

    async def submit_child(self, child: Task) -> None:
        """Submit ``child`` (idempotent on its id) and link it to its parent."""

    async def child_result(self, task_id: str) -> Result | None:
        """A child's result once it ended, wherever it lives; None before."""

    async def child_ended(self, parent_id: str, child_id: str, result_json: bytes) -> ChildEnded:
        """Record a child's end on its parent's slot (and wake the parent if it was due)."""


@dataclass(frozen=True, slots=True)
class ChildWaitRequest:
    mode: WaitMode
    children: tuple[str, ...]
    awaiting: tuple[str, ...]


@dataclass(slots=True)
class Delegating:
    """One delivery's delegations: what ``delegate_many`` needs, and the wait it parks on."""

    bus: ChildWaits
    keys: ShardKeys
    task: Task
    parentage: Parentage | None
    max_depth: int
    children: list[str] = field(default_factory=list)
    request: ChildWaitRequest | None = None

    async def delegate_many(
        self, step_ids: Sequence[str], calls: Sequence[Delegation], limit: int | None
    ) -> list[Result]:
        if limit is not None and limit < 1:
            raise ConfigError(f"delegate_many(limit=...) must be at least 1, not {limit!r}")
        if self.parentage is None:
            raise ConfigError("this worker cannot delegate: it was started without an orchestrator")
        depth = (self.task.depth or 0) + 1
        if depth > self.max_depth:
            raise DelegationTooDeep(
                f"task {self.task.task_id} is at depth {depth - 1}: a child would pass "
                f"delegation.max_depth ({self.max_depth})"
            )
        ids = [child_id(self.task.task_id, s) for s in step_ids]
        recorded = await self.bus.child_results(self.keys, self.task.task_id, ids)
        # The first ``limit`` children that have not ended: those submitted earlier (a
        # prefix, so they come first) and the next ones. Never more than ``limit`` in flight.
        open_ = [i for i, c in enumerate(ids) if c not in recorded]
        flight = open_[: limit or len(ids)]
        for i in flight:
            await self.parentage.submit_child(self._child(ids[i], calls[i], depth))
        last = flight[-1] if flight else len(ids) - 1
        self.children += [c for c in ids[: last + 1] if c not in self.children]
        if not flight:
            return [_result(recorded[c]) for c in ids]
        mode = WaitMode.ANY if len(open_) > len(flight) else WaitMode.ALL
        self.request = ChildWaitRequest(mode, tuple(self.children), tuple(ids[i] for i in flight))
        raise Parked(f"task {self.task.task_id} waits for {len(flight)} child task(s)")

    def _child(self, task_id: str, call: Delegation, depth: int) -> Task:
        parent = self.task
        deadline = call.deadline
        if parent.deadline is not None and (deadline is None or parent.deadline < deadline):
            deadline = parent.deadline  # the tighter of the two
        try:
            return Task(
                task_id=task_id,
                intent=call.intent,
                payload=call.payload,
                deadline=deadline,
                priority=call.priority,
                tenant=parent.tenant,
                traceparent=parent.traceparent,
                parent_id=parent.task_id,
                depth=depth,
            )
        except ValidationError as exc:  # the agent's own mistake: one clear line
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "task"
            raise InvalidInput(f"delegate({call.intent!r}): {where}: {first['msg']}") from exc


def _result(raw: bytes) -> Result:
    """A recorded child's Result; its model spend counts in the parent's."""
    result = Result.model_validate_json(raw)
    usage = current_usage()
    if usage is not None:
        usage.carry(result.metrics.tokens_used, result.metrics.cost_usd, result.degraded)
    return result


@dataclass(frozen=True, slots=True)
class Delegations:
    """The worker's side of ``delegate``: builds each delivery's ``Delegating``."""

    bus: ChildWaits
    parentage: Parentage | None
    max_depth: int
    sweep_ms: int

    def open(self, keys: ShardKeys, task: Task) -> Delegating:
        delegating = Delegating(self.bus, keys, task, self.parentage, self.max_depth)
        _current.set(delegating)
        return delegating

    async def sweep(
        self, keys: ShardKeys, tiers: Sequence[str], parent_id: str, awaiting: Sequence[str]
    ) -> int:
        """The parent's wait came due while children run: send again the end of each child
        that ended (a crash between its commit and ``child_ended`` lost it). How many."""
        if self.parentage is None:
            return 0
        sent = 0
        for child in awaiting:
            result = await self.parentage.child_result(child)
            if result is None:
                continue
            status = await self.bus.child_ended(
                keys, tiers, parent_id, child, encode_result(result), ()
            )
            if status in (ChildEnded.WOKE, ChildEnded.RECORDED):
                sent += 1
                log.info(
                    "swept the end of child %s to task %s",
                    child,
                    parent_id,
                    extra={"action": "child_swept", "task_id": parent_id},
                )
        return sent


async def notify_parent(parentage: Parentage, task: Task, result_json: bytes) -> None:
    """After a child's outcome landed: record it on its parent's slot. A failure is logged;
    the parent's sweep sends it again."""
    assert task.parent_id is not None
    try:
        await parentage.child_ended(task.parent_id, task.task_id, result_json)
    except (TransportError, OSError) as exc:
        log.warning(
            "the end of child %s did not reach task %s (its sweep will send it): %s",
            task.task_id,
            task.parent_id,
            exc,
            extra={"action": "child_end_deferred", "task_id": task.task_id},
        )


_current: ContextVar[Delegating | None] = ContextVar("deepagents_delegating", default=None)


def current_delegating() -> Delegating:
    delegating = _current.get()
    if delegating is None:
        raise ConfigError("delegate() works inside a running task only")
    return delegating
