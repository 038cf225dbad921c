"""``A2ARemoteAgent``: an external A2A agent as a remote agent type (docs/remote-agents.md,
"A2A agents"), configured ``remote: {protocol: a2a, url: ...}``.

A task is one A2A task: its payload goes as a data part of a first message (metadata
``intent``), and the worker waits (within the call's timeout and the task's deadline) until
the A2A task ends or asks for input. A question (``input-required``) becomes ``ctx.ask``: the
task parks holding no slot, a reply (``POST /v1/tasks/{id}/reply``, or A2A at the gateway)
resumes it, and the answer goes to the A2A task as the next message. The messages sent are
durable steps, so a resumed or redelivered task does not send its first message again.
Without durable steps (an in-memory bus) a question fails the task, saying so.

The fleet's circuit breaker, the Retry-After cap and the deadline are the remote agent's
(``agent.py``); so are the results' audit and the registry's health entry, whose version is
the agent card's.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from pydantic import RootModel

from deepagents._internal.ids import uuid7_str
from deepagents.contract.agent import current_attempt
from deepagents.contract.context import active_context
from deepagents.contract.result import Result
from deepagents.contract.task import Task
from deepagents.errors import ErrorCode, RetryableError
from deepagents.remote.a2a_wire import A2AWire, Outcome, failure, message
from deepagents.remote.agent import INTRODUCE_S, RemoteAgent, _headers, _ssl_context
from deepagents.remote.errors import ServiceDown, ServiceUnhealthy
from deepagents.store.breaker import BreakerState
from deepagents.store.models import RedisClient

_VERSION_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-")
_ENDS = {
    "TASK_STATE_FAILED": (ErrorCode.AGENT_ERROR, "the A2A agent failed the task"),
    "TASK_STATE_REJECTED": (ErrorCode.REJECTED, "the A2A agent rejected the task"),
    "TASK_STATE_CANCELED": (ErrorCode.CANCELLED, "the A2A task was canceled"),
    "TASK_STATE_AUTH_REQUIRED": (
        ErrorCode.AGENT_ERROR,
        "the A2A agent asks for authentication (auth-required), which a worker cannot give",
    ),
}


class Answer(RootModel[Any]):
    """Any JSON answer to an A2A agent's question: it goes to the agent as it is (a string
    as a text part, anything else as a data part)."""


class A2ARemoteAgent(RemoteAgent):
    """Subclassed per agent type by ``remote_agent_class`` when ``protocol`` is ``a2a``."""

    name = "remote-a2a"

    def __init__(self, *, redis: RedisClient | None = None, prefix: str = "da") -> None:
        super().__init__(redis=redis, prefix=prefix)
        config = self.remote
        headers = {k: v for k, v in _headers(config).items() if k not in ("content-type", "accept")}
        self._a2a = A2AWire(config.url, headers, _ssl_context(config), config.max_connections)

    async def aclose(self) -> None:
        await self._a2a.aclose()
        await super().aclose()

    # the contract ---------------------------------------------------------------------

    async def can_handle(self, task: Task) -> bool:
        return not self.intents or task.intent in self.intents

    async def prepare_context(self, task: Task) -> dict[str, Any]:
        return {"task": task, "remote": {}}

    async def execute(self, context: dict[str, Any]) -> Result:
        task: Task = context["task"]
        first = message(
            "",
            task.payload,
            message_id=f"{task.task_id}:{current_attempt.get()}",
            intent=task.intent,
        )
        ctx = active_context()
        if ctx is None:
            outcome = await self._a2a_call(task, first)
            if outcome.state == "TASK_STATE_INPUT_REQUIRED":
                return Result.failed(
                    ErrorCode.AGENT_ERROR,
                    f"the A2A agent asks {outcome.text[:500]!r} (input-required), and this "
                    "worker keeps no durable steps to park the task on (ctx.ask needs Redis)",
                )
            return _result(outcome)
        outcome = Outcome.from_json(await ctx.step("a2a_send", self._send_json, task, first))
        while outcome.state == "TASK_STATE_INPUT_REQUIRED":
            answer = await ctx.ask(
                outcome.text or "the A2A agent asks for input",
                schema=Answer,
                timeout_s=self.remote.ask_timeout_s,
            )
            reply = message(
                outcome.task_id,
                answer.root,
                message_id=uuid7_str(),  # sent once: the step records what it answered
                intent=task.intent,
            )
            outcome = Outcome.from_json(await ctx.step("a2a_answer", self._send_json, task, reply))
        return _result(outcome)

    async def post_process(self, result: Result) -> Result | dict[str, Any]:
        return {}

    async def health_check(self) -> bool:
        if self._circuit is not None and await self._circuit.state() is BreakerState.OPEN:
            raise ServiceUnhealthy("remote service: the fleet's circuit breaker is open")
        await self._learn_card()
        return True

    async def introduce(self) -> None:
        with contextlib.suppress(ServiceUnhealthy, TimeoutError):
            async with asyncio.timeout(INTRODUCE_S):
                await self._learn_card()

    async def _learn_card(self) -> None:
        """The agent card answers (the A2A agent's health), and names its version."""
        try:
            card = await self._a2a.card(self._timeout)
        except Exception as exc:
            why = failure(exc, self._mask.text, False, self._timeout)
            raise ServiceUnhealthy(f"remote service: agent card: {why}") from exc
        version = card.version[:64]
        if version and set(version) <= _VERSION_CHARS and version[0].isalnum():
            type(self).version = version

    # one call -------------------------------------------------------------------------

    async def _send_json(self, task: Task, sent: Any) -> dict[str, Any]:
        return (await self._a2a_call(task, sent)).as_json()

    async def _a2a_call(self, task: Task, sent: Any) -> Outcome:
        """One exchange, within the call's timeout and the task's deadline, through the
        fleet's breaker; its failure as the remote wire's errors."""
        timeout, by_deadline, left_ms = self._call_timeout(task)
        try:
            if self._circuit is None:
                return await self._exchange(sent, timeout, by_deadline)
            permit = await self._circuit.permit(task, "execute", timeout)
            try:
                outcome = await self._exchange(sent, timeout, by_deadline)
            except Exception as exc:
                await self._circuit.record(permit, task, "execute", exc)
                raise
            await self._circuit.record(permit, task, "execute", None)
            return outcome
        except RetryableError as exc:
            cap = self._max_retry_after_s
            if left_ms is not None:
                cap = min(cap, left_ms / 1000)
            exc.retry_after_s = min(exc.retry_after_s, cap)
            raise

    async def _exchange(self, sent: Any, timeout: float, by_deadline: bool) -> Outcome:
        try:
            async with self._slots, asyncio.timeout(timeout):
                return await self._a2a.send(sent, timeout)
        except TimeoutError as exc:
            if by_deadline:
                raise TimeoutError("execute: the task's deadline passed during the call") from exc
            raise ServiceDown(f"execute: no answer within {timeout:g} s") from exc
        except Exception as exc:
            mapped = failure(exc, self._mask.text, by_deadline, timeout)
            if mapped is exc:
                raise
            raise mapped from exc


def _result(outcome: Outcome) -> Result:
    if outcome.state == "TASK_STATE_COMPLETED":
        return Result(output=outcome.output)
    code, default = _ENDS.get(outcome.state, (ErrorCode.AGENT_ERROR, outcome.state))
    said = outcome.text[:2000]
    return Result.failed(code, f"{default}: {said}" if said else default, output=outcome.output)
