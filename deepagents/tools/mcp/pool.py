"""The MCP servers of one agent in one worker process: one pooled session per server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar

from deepagents._internal.extras import require_extra
from deepagents.config.schema import McpServerConfig
from deepagents.tools.errors import ToolUnavailable
from deepagents.tools.mcp.session import McpSession
from deepagents.tools.mcp.tool import McpTool, listed_tool


class McpServers:
    def __init__(self, servers: Mapping[str, McpServerConfig]) -> None:
        if servers:
            require_extra("mcp", "MCP servers (mcp_servers in the agent's configuration)")
        self.configs = dict(servers)
        self._sessions: dict[str, McpSession] = {}
        self._tools: dict[str, list[McpTool]] = {}
        self._listing: dict[str, asyncio.Lock] = {}

    def session(self, server: str) -> McpSession:
        config = self.configs.get(server)
        if config is None:
            known = ", ".join(sorted(self.configs)) or "none"
            raise ToolUnavailable(f"no MCP server named {server!r} is configured (known: {known})")
        found = self._sessions.get(server)
        if found is None:
            found = self._sessions[server] = McpSession(server, config)
        return found

    async def tools(self, server: str, *, refresh: bool = False) -> list[McpTool]:
        """The server's tools, listed once per process (``refresh`` lists again)."""
        session = self.session(server)
        lock = self._listing.setdefault(server, asyncio.Lock())
        async with lock:
            if refresh or server not in self._tools:
                listed = await session.list_tools()
                config = self.configs[server]
                self._tools[server] = [listed_tool(session, config, t) for t in listed]
            return list(self._tools[server])

    async def all_tools(self) -> list[McpTool]:
        out: list[McpTool] = []
        for server in self.configs:
            out += await self.tools(server)
        return out

    async def aclose(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)


_servers: ContextVar[McpServers | None] = ContextVar("deepagents_mcp_servers", default=None)


@contextlib.contextmanager
def use_mcp_servers(servers: McpServers) -> Iterator[McpServers]:
    token = _servers.set(servers)
    try:
        yield servers
    finally:
        _servers.reset(token)


def current_mcp_servers() -> McpServers:
    """The running agent's MCP servers (the worker opens them from its configuration)."""
    servers = _servers.get()
    if servers is None:
        raise ToolUnavailable("no MCP servers here: configure mcp_servers for the agent")
    return servers


async def mcp_tools(server: str) -> list[McpTool]:
    """The tools of the running agent's MCP server ``server``."""
    return await current_mcp_servers().tools(server)
