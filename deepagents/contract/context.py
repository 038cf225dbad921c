"""What a long-running agent sees of its task while it runs: durable steps, parallel lanes,
phases, a checkpointed state and questions to a person (docs/design.md, "Durable steps").

The interface lives here, in the pure contract layer; the worker implements it
(``deepagents/worker/steps.py``) and hands it to the agent as ``context["ctx"]`` and as
``current_context()``. Nothing here does I/O.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeVar, overload

from pydantic import BaseModel

from deepagents.contract.inbox import InboxAction, InboxAnswer
from deepagents.contract.result import Result
from deepagents.errors import StepError

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
OnTimeout = Literal["fail", "default", "escalate"]


@dataclass(frozen=True, slots=True)
class Delegation:
    """One child task to submit (``ctx.delegate_many``): its intent and payload; it inherits
    the parent's tenant and trace, and the tighter of ``deadline`` and the parent's."""

    intent: str
    payload: dict[str, Any] = field(default_factory=dict)
    deadline: datetime | None = None
    priority: int | None = None


class PhaseScope(ABC):
    """What ``ctx.phase(name)`` returns: the phase is set at once (a setter), and used as a
    context manager it puts the previous phase back on exit."""

    def __enter__(self) -> PhaseScope:
        return self

    @abstractmethod
    def __exit__(self, *exc: object) -> None: ...


class TaskContext(ABC):
    """The running task's durable context. One per delivery; its records outlive it.

    Guarantees (docs/design.md, "Durable steps"):

    - ``step`` runs ``fn`` and records its JSON result durably, owner-checked, before the
      step counts as done; on a later delivery of the task a recorded step returns its
      recorded result without running. A step whose ``fn`` finished but whose record had not
      landed when the worker died runs again (the in-flight step is at-least-once; completed
      steps are exactly-once): pass ``step_key`` to external systems as an idempotency key.
    - A name used more than once in a run gets an occurrence counter per lane (``name#2``),
      so a loop of steps replays deterministically; each lane of ``gather`` counts apart.
    - A worker that lost its entry (paused, partitioned, reclaimed) cannot record anything.
    """

    @property
    @abstractmethod
    def task_id(self) -> str: ...

    @property
    @abstractmethod
    def step_key(self) -> str:
        """Inside a step: ``<task_id>/<step id>``, the same on every delivery of the task;
        the idempotency key to hand to an external system the step writes to."""

    @property
    @abstractmethod
    def resumed(self) -> bool:
        """True when this delivery found steps completed by an earlier one."""

    @overload
    async def step(self, name: str, fn: Callable[..., Awaitable[T]], *args: Any) -> T: ...

    @overload
    async def step(self, name: str, fn: Callable[..., T], *args: Any) -> T: ...

    @abstractmethod
    async def step(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` once per task (sync in a thread, async awaited) and record its
        JSON result; return the recorded result when an earlier delivery completed it. The
        value returned is the result as recorded (decoded JSON: a tuple comes back a list),
        the same on the first delivery as on a later one."""

    @abstractmethod
    async def gather(self, *aws: Awaitable[Any]) -> list[Any]:
        """Run the awaitables (usually coroutines calling ``step``) as parallel lanes; the
        results in order. The first failure cancels the other lanes and is raised."""

    @abstractmethod
    def phase(self, name: str) -> PhaseScope:
        """Mark the phase the following steps belong to (a bounded label: metrics, audit)."""

    @property
    @abstractmethod
    def state(self) -> Any:
        """The agent's ``state_model`` instance: the last checkpoint's, else a fresh one.
        Raises ``StepError`` when the agent declares no ``state_model``."""

    @abstractmethod
    async def checkpoint(self) -> None:
        """Record ``state`` durably (owner-checked). Over the agent's ``max_state_bytes`` the
        task fails with ``state_too_large`` and the stored checkpoint stays as it was."""

    @overload
    async def ask(
        self,
        question: str,
        *,
        schema: type[M],
        timeout_s: float,
        on_timeout: OnTimeout = "fail",
        default: M | None = None,
    ) -> M: ...

    @overload
    async def ask(
        self,
        question: str,
        *,
        schema: type[M],
        timeout_s: float,
        on_timeout: OnTimeout = "fail",
        default: M | None = None,
        actions: Sequence[InboxAction | str],
        proposal: M | None = None,
    ) -> InboxAnswer[M]: ...

    @abstractmethod
    async def ask(
        self,
        question: str,
        *,
        schema: type[M],
        timeout_s: float,
        on_timeout: OnTimeout = "fail",
        default: M | None = None,
        actions: Sequence[InboxAction | str] | None = None,
        proposal: M | None = None,
    ) -> M | InboxAnswer[M]:
        """Park the task until a person answers ``question`` (validated by ``schema``).

        With ``actions`` (any of ``accept``, ``edit``, ``respond``, ``ignore``) the person
        acts on ``proposal`` the Agent Inbox way, and an ``InboxAnswer`` says what they
        did (docs/human-replies.md, "Actions")."""

    async def delegate(
        self,
        intent: str,
        payload: dict[str, Any] | None = None,
        *,
        deadline: datetime | None = None,
        priority: int | None = None,
    ) -> Result:
        """Submit a child task and park (no slot held) until it ends; its ``Result``, a
        failed one included. The child is submitted once however often this task runs."""
        call = Delegation(intent, payload or {}, deadline, priority)
        return (await self.delegate_many([call]))[0]

    @abstractmethod
    async def delegate_many(
        self, calls: Sequence[Delegation], *, limit: int | None = None
    ) -> list[Result]:
        """Submit the children, at most ``limit`` in flight at once, and park until the
        last ends; their ``Result``s in order. Each child's result is recorded as a step."""

    async def load_records(self, kind: str) -> dict[str, bytes]:
        """The fields this task recorded under ``kind`` (``save_records``), by name: what an
        adapter keeps beside the steps (the LangGraph checkpoint saver's, ``lg``)."""
        raise StepError(f"{type(self).__name__} keeps no records")

    async def save_records(self, kind: str, fields: Sequence[tuple[str, bytes]]) -> None:
        """Record ``fields`` under ``kind``: owner-checked like a step, and sent with the
        other deliveries' records (one round trip per batch). Lands before it returns."""
        raise StepError(f"{type(self).__name__} keeps no records")


_current: ContextVar[TaskContext | None] = ContextVar("deepagents_task_context", default=None)


def current_context() -> TaskContext:
    """The running task's context (also ``context["ctx"]`` in ``execute``)."""
    ctx = _current.get()
    if ctx is None:
        raise StepError("no task is running here: current_context() works inside a task")
    return ctx


def active_context() -> TaskContext | None:
    """The runtime's: the running task's context, or None (no task, or no steps here)."""
    return _current.get()


def bind_context(ctx: TaskContext | None) -> None:
    """The runtime's: make ``ctx`` the current context of this delivery's asyncio context."""
    _current.set(ctx)
