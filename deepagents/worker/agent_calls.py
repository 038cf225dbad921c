"""Run an agent's four-method contract, whatever mix of sync and async it uses.

Sync methods run in the worker's thread pool so blocking work never stalls the loop;
methods the agent did not override run inline (they are trivial and non-blocking).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any

from opentelemetry.trace import SpanKind, Tracer
from pydantic import ValidationError

from deepagents.contract.agent import AgentContract
from deepagents.contract.context import active_context
from deepagents.contract.result import ErrorCode, Result, ResultMetrics
from deepagents.contract.task import Task
from deepagents.errors import InvalidResult
from deepagents.telemetry.logs import current_task_id
from deepagents.telemetry.tracing import Tracing, attached, extract

_METHODS = (
    "can_handle",
    "prepare_context",
    "execute",
    "degraded_execute",
    "post_process",
    "health_check",
)


class _Method:
    __slots__ = ("fn", "inline", "is_async", "plain")

    def __init__(self, agent: AgentContract, name: str) -> None:
        self.fn: Callable[[Any], Any] = getattr(agent, name)
        self.is_async = inspect.iscoroutinefunction(self.fn)
        base = getattr(AgentContract, name, None)
        self.inline = getattr(type(agent), name, None) is base
        # The base class's own method: synchronous, returns a plain value, trivial.
        self.plain = self.inline and not self.is_async


class AgentRunner:
    def __init__(
        self, agent: AgentContract, executor: Executor, tracing: Tracing | None = None
    ) -> None:
        self.agent = agent
        self._executor = executor
        self.executor = executor  # sync steps (worker/steps.py) run in the same pool
        self._methods = {name: _Method(agent, name) for name in _METHODS}
        self._tracer: Tracer | None = tracing.tracer if tracing is not None else None
        self.tracer = self._tracer  # steps (worker/steps.py) trace with it too

    async def _call(self, name: str, *args: Any) -> Any:
        method = self._methods[name]
        if method.is_async:
            return await method.fn(*args)
        if method.inline:
            value = method.fn(*args)
        else:
            loop = asyncio.get_running_loop()
            call = functools.partial(contextvars.copy_context().run, method.fn, *args)
            value = await loop.run_in_executor(self._executor, call)
        if inspect.isawaitable(value):
            value = await value
        return value

    def run(self, task: Task, execute: str = "execute") -> Awaitable[Result]:
        """The contract, in the task's trace: a CONSUMER span continuing the submitter's
        traceparent and one span per method when a tracer records; otherwise only the
        submitter's context is attached (log lines and model calls still see its trace id).
        Each task runs in its own context, so the context variables set here stay in it.
        Not a coroutine itself: untraced and without a traceparent (most tasks) the caller
        awaits ``_run`` directly, one coroutine less per task. ``execute`` names the method
        run between prepare_context and post_process (``degraded_execute`` for degrade)."""
        current_task_id.set(task.task_id)
        if self._tracer is None and task.traceparent is None:
            return self._run(task, execute)
        return self._run_traced(task, execute)

    async def _run_traced(self, task: Task, execute: str) -> Result:
        parent = extract(task.traceparent) if task.traceparent is not None else None
        if self._tracer is None:
            with attached(parent):
                return await self._run(task, execute)
        with self._tracer.start_as_current_span(
            f"process {self.agent.name}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes={"deepagents.agent": self.agent.name, "deepagents.task_id": task.task_id},
        ):
            return await self._run(task, execute)

    def _step(self, name: str, *args: Any) -> Awaitable[Any]:
        """Untraced, an async method's own coroutine, awaited by the caller: no wrapper
        coroutine per step, which is a measurable share of a remote agent's task."""
        if self._tracer is None:
            method = self._methods[name]
            return method.fn(*args) if method.is_async else self._call(name, *args)
        return self._traced_step(name, *args)

    async def _traced_step(self, name: str, *args: Any) -> Any:
        assert self._tracer is not None
        with self._tracer.start_as_current_span(name):
            return await self._call(name, *args)

    async def _run(self, task: Task, execute_name: str = "execute") -> Result:
        """can_handle → prepare_context → execute → post_process; exceptions propagate.

        Untraced, a method the agent did not override is called directly and an async one
        awaited directly: no coroutine per step, which is a measurable share of a fast task."""
        methods = self._methods
        direct = self._tracer is None
        can = methods["can_handle"]
        if can.plain:
            ok = can.fn(task)
        elif can.is_async:
            ok = await can.fn(task)
        else:
            ok = await self._call("can_handle", task)
        if not ok:
            return Result.failed(ErrorCode.REJECTED, f"{self.agent.name} cannot handle this task")
        prep = methods["prepare_context"]
        if direct and prep.plain:
            context = prep.fn(task)
        else:
            context = await self._step("prepare_context", task)
        ctx = active_context()
        if ctx is not None and isinstance(context, dict):
            context["ctx"] = ctx  # the durable steps, when the worker records them
        execute = methods[execute_name]
        if direct and execute.is_async:
            result = await execute.fn(context)
        else:
            result = await self._step(execute_name, context)
        if not isinstance(result, Result):
            raise InvalidResult(
                f"{execute_name}() must return a Result, not {type(result).__name__}"
            )
        post = methods["post_process"]
        processed = (
            post.fn(result) if direct and post.plain else await self._step("post_process", result)
        )
        if isinstance(processed, Result):
            return processed
        if isinstance(processed, dict):
            if not processed:  # no metrics to add: the result as it is, not a copy
                return result
            return result.model_copy(update={"metrics": _merged(result.metrics, processed)})
        raise InvalidResult(
            f"post_process() must return a Result or a dict, not {type(processed).__name__}"
        )

    async def health_check(self) -> bool:
        return bool(await self._call("health_check"))


def _merged(metrics: ResultMetrics, extra: dict[str, Any]) -> ResultMetrics:
    """post_process's metrics over the result's. Metrics that do not validate break the
    contract; the message names the fields, never their values (they may be payload)."""
    try:
        return ResultMetrics.model_validate({**metrics.model_dump(), **extra})
    except ValidationError as exc:
        fields = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_input=False)
        )
        raise InvalidResult(
            f"post_process() returned metrics that do not validate: {fields}"
        ) from None
