"""What ``wrap_tool_call`` needs from its process: the fleet's breaker per tool (in Redis,
``store.breaker``), metrics, tracing, the key arguments are hashed with, and the MCP
servers' pooled sessions. One ``ToolCalls`` per worker process, made current with
``use_tool_calls`` (tasks created inside inherit it); without one, calls still run, with no
breaker, metric or span."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING

from deepagents._internal.background import Background
from deepagents.store.breaker import CircuitBreaker, Keyed, Permit
from deepagents.store.models import RedisClient
from deepagents.telemetry.logs import current_task_id
from deepagents.telemetry.metrics import ToolCallMetrics
from deepagents.telemetry.tracing import Tracing
from deepagents.tools.definition import Tool
from deepagents.tools.errors import ToolCallError, ToolProtocolError, ToolTimeout, ToolUnavailable
from deepagents.transport.keys import Keys

if TYPE_CHECKING:
    from deepagents.tools.mcp.pool import McpServers

# What says a tool's server is unwell, for its breaker: it did not answer, or not sensibly.
# A tool's own failure (it answered "no") or arguments it refused show it is up.
UNWELL = (ToolUnavailable, ToolTimeout, ToolProtocolError)


class ToolBreaker:
    """The fleet's circuit breaker of one tool (``store.breaker``, keyed ``{tool:<id>}``)."""

    def __init__(self, breaker: CircuitBreaker, owner: ToolCalls) -> None:
        self._breaker = breaker
        self._owner = owner

    async def allow(self, timeout_s: float) -> Permit:
        # A probe is held as long as its call may take: if its worker dies, another probes.
        return await self._breaker.allow(probe_ttl_s=timeout_s)

    async def record(self, permit: Permit, error: ToolCallError | None) -> None:
        unwell = isinstance(error, UNWELL)
        if unwell or permit.probe:
            # a failure counts once per task in the window (one poison task opens it for none)
            await self._breaker.record(not unwell, probe=permit.probe, task=current_task_id.get())
        elif self._breaker.note_success():
            self._owner.background.send(self._breaker.flush())

    async def flush(self) -> None:
        await self._breaker.flush()


class ToolCalls:
    def __init__(
        self,
        redis: RedisClient | None = None,
        *,
        prefix: str = "da",
        metrics: ToolCallMetrics | None = None,
        tracing: Tracing | None = None,
        hash_key: bytes | None = None,
        mcp: McpServers | None = None,
    ) -> None:
        self.redis, self.keys = redis, Keys(prefix)
        self.metrics, self.tracing = metrics, tracing
        self.hash_key = hash_key
        self.mcp = mcp
        self._breakers: dict[str, ToolBreaker] = {}
        self.background = Background()  # the breakers' flushes of held successes

    def breaker(self, tool: Tool) -> ToolBreaker | None:
        if self.redis is None:
            return None
        ident = f"{tool.server}/{tool.name}"
        found = self._breakers.get(ident)
        if found is None:
            where = Keyed(self.keys.tool_breaker(ident), self.keys.tool_breaker_window(ident))
            breaker = CircuitBreaker(self.redis, where, tool.policy.breaker)
            found = self._breakers[ident] = ToolBreaker(breaker, self)
        return found

    async def aclose(self) -> None:
        """Send the successes not sent yet; close the MCP sessions."""
        await self.background.drain()
        for breaker in self._breakers.values():
            with contextlib.suppress(Exception):
                await breaker.flush()
        if self.mcp is not None:
            await self.mcp.aclose()

    async def __aenter__(self) -> ToolCalls:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


_calls: ContextVar[ToolCalls | None] = ContextVar("deepagents_tool_calls", default=None)


@contextlib.contextmanager
def use_tool_calls(calls: ToolCalls) -> Iterator[ToolCalls]:
    """Make ``calls`` the one ``wrap_tool_call`` uses in this context."""
    token = _calls.set(calls)
    try:
        yield calls
    finally:
        _calls.reset(token)


def current_tool_calls() -> ToolCalls | None:
    return _calls.get()
