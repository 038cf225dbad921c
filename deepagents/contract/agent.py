"""The agent contract: four methods, each sync or async.

The runtime calls ``can_handle`` → ``prepare_context`` → ``execute`` → ``post_process``.
Sync methods run in a thread pool, so blocking work never stalls the event loop.
A long-running agent also finds its task's durable context (``contract/context.py``) as
``context["ctx"]``: steps, branches, phases and a checkpointed ``state_model``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable
from contextvars import ContextVar
from typing import Any, ClassVar

from pydantic import BaseModel

from deepagents.contract.result import Result
from deepagents.contract.task import Task

# The attempt the running delivery belongs to (1, then + 1 per retry; a redelivery after a
# crash keeps it): with the task id, the idempotency key a remote agent dedupes on.
current_attempt: ContextVar[int] = ContextVar("deepagents_attempt", default=1)

Maybe = Any  # a value or an awaitable of it; the runtime adapts both


class AgentContract(ABC):
    """Subclass it, declare ``name``, ``version`` and ``intents``, implement ``execute``.

    ``input_model`` (optional) is a pydantic model the payload must satisfy; the
    orchestrator checks it before anything is enqueued.
    """

    name: ClassVar[str]
    version: ClassVar[str] = "0"
    intents: ClassVar[tuple[str, ...]] = ()
    input_model: ClassVar[type[BaseModel] | None] = None
    # The state a long-running agent checkpoints (``ctx.state``, ``ctx.checkpoint()``):
    # a pydantic model of JSON values, with defaults for a task's first delivery.
    state_model: ClassVar[type[BaseModel] | None] = None
    # Exception types (subclasses included) that end the task at once, and ones retried up
    # to max_deliveries whatever they are; the YAML's settings add to these by name
    # (``docs/retries.md``). The most specific class of a failure decides.
    non_retryable: ClassVar[tuple[type[BaseException], ...]] = ()
    always_retry: ClassVar[tuple[type[BaseException], ...]] = ()

    def can_handle(self, task: Task) -> bool | Awaitable[bool]:
        return task.intent in self.intents

    def prepare_context(self, task: Task) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        return {"task": task, "payload": task.payload}

    @abstractmethod
    def execute(self, context: dict[str, Any]) -> Result | Awaitable[Result]:
        """Do the work. Return a Result; raise ``InvalidInput`` or ``RetryableError``."""

    def post_process(
        self, result: Result
    ) -> Result | dict[str, Any] | Awaitable[Result | dict[str, Any]]:
        """Return a Result to replace it, or a dict of agent-specific metrics to add."""
        return result

    def health_check(self) -> bool | Awaitable[bool]:
        return True

    def migrate_state(self, from_version: str, state: dict[str, Any]) -> dict[str, Any]:
        """Turn a checkpoint written under agent version ``from_version`` into this
        version's ``state_model`` shape; runs on resume before validation. Raise (or return
        something that does not validate) and the task is dead-lettered ``state_incompatible``.
        The default keeps the state as it is."""
        return state

    # Optional: what ``degrade`` does when a task waited past its tier's max_wait_ms. An
    # agent that overrides neither has its overdue task moved to the next tier.

    def degraded_execute(self, context: dict[str, Any]) -> Result | Awaitable[Result]:
        """A cheaper answer for a task that waited too long (a smaller model, a rule of
        thumb): run instead of ``execute`` between ``prepare_context`` and
        ``post_process``; the Result is marked ``degraded``. Override to declare one."""
        raise NotImplementedError

    def cache_key(self, task: Task) -> str | None:
        """The key under which this task's good answer may stand in for another's (e.g.
        the instrument a risk check is about). With one, the worker keeps the last good
        answer per key for ``answer_cache_ttl_s``, and ``degrade`` answers from it. None:
        this task has no stand-in. Called on the event loop, after each good run: keep it
        a cheap, pure function of the task (no I/O)."""
        return None


def declares(agent: AgentContract, method: str) -> bool:
    """The agent overrides this optional method of the contract."""
    return getattr(type(agent), method, None) is not getattr(AgentContract, method)
