"""The chain: a list of middleware run in LangChain 1.x's order.

Built once per agent (or per run, for middleware given in code): for each hook, only the
middleware that override it, so an unused hook costs nothing on the hot path.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from deepagents.agentkit.middleware import (
    AgentMiddleware,
    AgentState,
    Jump,
    ModelHandler,
    ModelRequest,
    ModelResponse,
    ToolHandler,
    ToolRequest,
)
from deepagents.config.middleware import check_order
from deepagents.contract.toolcalls import ToolResult
from deepagents.errors import ConfigError

NodeHook = Callable[[AgentState], Awaitable[Jump | None]]
BUILTINS = frozenset(
    {"guardrail", "loop_detection", "limits", "context_budget", "approval", "pii_redaction"}
)
Req = TypeVar("Req", ModelRequest, ToolRequest)
Resp = TypeVar("Resp", ModelResponse, ToolResult)


def _overrides(middleware: AgentMiddleware, hook: str) -> bool:
    return getattr(type(middleware), hook) is not getattr(AgentMiddleware, hook)


def _hooks(middleware: Sequence[AgentMiddleware], hook: str) -> tuple[NodeHook, ...]:
    return tuple(getattr(m, hook) for m in middleware if _overrides(m, hook))


class Chain:
    """``before_*`` first to last, ``after_*`` last to first, wrap hooks nested with the
    first outermost. Refuses (``ConfigError``, naming the entry) an order of built-ins it
    cannot honour, as the YAML loader does."""

    def __init__(self, middleware: Sequence[AgentMiddleware] = ()) -> None:
        self.middleware = tuple(middleware)
        for i, item in enumerate(self.middleware):
            if not isinstance(item, AgentMiddleware):
                raise ConfigError(
                    f"{type(item).__name__} is not an AgentMiddleware", field=f"middleware[{i}]"
                )
        check_order([m.name for m in self.middleware if m.name in BUILTINS])
        self._before_agent = _hooks(self.middleware, "before_agent")
        self._before_model = _hooks(self.middleware, "before_model")
        self._after_model = _hooks(self.middleware[::-1], "after_model")
        self._after_agent = _hooks(self.middleware[::-1], "after_agent")
        self._wrap_model = tuple(
            m.wrap_model_call for m in self.middleware if _overrides(m, "wrap_model_call")
        )
        self._wrap_tool = tuple(
            m.wrap_tool_call for m in self.middleware if _overrides(m, "wrap_tool_call")
        )

    def __add__(self, other: Chain) -> Chain:
        return Chain(self.middleware + other.middleware)

    async def before_agent(self, state: AgentState) -> Jump | None:
        return await _run(self._before_agent, state)

    async def before_model(self, state: AgentState) -> Jump | None:
        return await _run(self._before_model, state)

    async def after_model(self, state: AgentState) -> Jump | None:
        return await _run(self._after_model, state)

    async def after_agent(self, state: AgentState) -> Jump | None:
        return await _run(self._after_agent, state)

    def model_handler(self, innermost: ModelHandler) -> ModelHandler:
        """``innermost`` (the model call itself) wrapped by every ``wrap_model_call``."""
        return _nest(self._wrap_model, innermost)

    def tool_handler(self, innermost: ToolHandler) -> ToolHandler:
        """``innermost`` (the tool call itself) wrapped by every ``wrap_tool_call``."""
        return _nest(self._wrap_tool, innermost)


async def _run(hooks: tuple[NodeHook, ...], state: AgentState) -> Jump | None:
    for hook in hooks:
        jump = await hook(state)
        if jump is not None:
            return jump  # the later hooks do not run: the loop goes where it was told
    return None


def _nest(
    wraps: Sequence[Callable[[Req, Callable[[Req], Awaitable[Resp]]], Awaitable[Resp]]],
    innermost: Callable[[Req], Awaitable[Resp]],
) -> Callable[[Req], Awaitable[Resp]]:
    handler = innermost
    for wrap in reversed(wraps):  # the last is innermost, so it is bound first
        handler = _bind(wrap, handler)
    return handler


def _bind(
    wrap: Callable[[Req, Callable[[Req], Awaitable[Resp]]], Awaitable[Resp]],
    inner: Callable[[Req], Awaitable[Resp]],
) -> Callable[[Req], Awaitable[Resp]]:
    def handler(request: Req) -> Awaitable[Resp]:
        return wrap(request, inner)

    return handler
