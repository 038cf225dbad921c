"""MCP servers' tools as ``Tool``s, through the official ``mcp`` SDK (the ``mcp`` extra).

``McpServers(config)`` holds one pooled session per configured server in this process;
``await servers.tools("files")`` lists that server's tools, each a ``Tool`` that
``wrap_tool_call`` calls. The worker builds one from the agent's ``mcp_servers`` and makes
it current: ``current_mcp_servers()`` (docs/tools.md).
"""

from deepagents.tools.mcp.pool import McpServers, current_mcp_servers, mcp_tools
from deepagents.tools.mcp.session import McpSession
from deepagents.tools.mcp.tool import McpTool

__all__ = ["McpServers", "McpSession", "McpTool", "current_mcp_servers", "mcp_tools"]
