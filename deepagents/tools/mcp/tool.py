"""An MCP server's tool as a ``Tool``: its listed schema checked like gateway input, its
policy from the agent's configuration (never from the server's own hints: a server is not
trusted to say its tool is safe to retry)."""

from __future__ import annotations

from typing import Any

from deepagents.config.schema import McpServerConfig
from deepagents.contract.toolcalls import ToolDefinition
from deepagents.tools.definition import Tool, ToolPolicy, checked_schema
from deepagents.tools.errors import ToolProtocolError
from deepagents.tools.mcp.session import McpSession

MAX_DESCRIPTION = 4096


class McpTool(Tool):
    def __init__(self, session: McpSession, definition: ToolDefinition, policy: ToolPolicy):
        self.session = session
        self.server = session.name
        self.definition = definition
        self.policy = policy

    async def invoke(self, arguments: dict[str, Any], *, idempotency_key: str | None) -> Any:
        return await self.session.call(self.name, arguments, idempotency_key=idempotency_key)


def listed_tool(session: McpSession, config: McpServerConfig, listed: Any) -> McpTool:
    """A tool as the server listed it, checked: a bounded name, description and schema."""
    name = listed.name
    if not isinstance(name, str) or not 0 < len(name) <= 128:
        raise ToolProtocolError(f"MCP server {session.name} listed a tool with a bad name")
    description = (listed.description or "")[:MAX_DESCRIPTION]
    schema = checked_schema(listed.input_schema, f"{session.name}/{name}")
    chosen = config.tools.get(name, config.default)
    policy = ToolPolicy(
        read_only=chosen.read_only,
        idempotent=chosen.idempotent,
        destructive=chosen.destructive,
        timeout_s=chosen.timeout_s,
        retries=chosen.retries,
    )
    return McpTool(session, ToolDefinition(name, description, schema), policy)
