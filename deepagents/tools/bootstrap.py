"""Wiring for the runtime: the worker wraps its run in ``tool_calls_scope`` (as it does in
``model_calls_scope``), so every task it runs finds its ``ToolCalls`` and MCP servers."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping

from deepagents.config.schema import McpServerConfig
from deepagents.store.models import RedisClient
from deepagents.telemetry.metrics import ToolCallMetrics
from deepagents.telemetry.tracing import Tracing
from deepagents.tools.runtime import ToolCalls, use_tool_calls


@contextlib.asynccontextmanager
async def tool_calls_scope(
    redis: RedisClient | None,
    *,
    prefix: str,
    mcp_servers: Mapping[str, McpServerConfig] | None = None,
    metrics: ToolCallMetrics | None = None,
    tracing: Tracing | None = None,
    hash_key: bytes | None = None,
) -> AsyncIterator[ToolCalls]:
    """``ToolCalls`` for this loop, current in this context; the agent's MCP servers (one
    pooled session each, opened on first use) current too; all closed on exit."""
    from deepagents.tools.mcp.pool import McpServers, use_mcp_servers

    mcp = McpServers(mcp_servers) if mcp_servers else None
    calls = ToolCalls(
        redis, prefix=prefix, metrics=metrics, tracing=tracing, hash_key=hash_key, mcp=mcp
    )
    try:
        with use_tool_calls(calls), contextlib.ExitStack() as stack:
            if mcp is not None:
                stack.enter_context(use_mcp_servers(mcp))
            yield calls
    finally:
        await calls.aclose()
