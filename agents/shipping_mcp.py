"""The shipping service's MCP server for the support desk example (agents/support_desk.py),
written with the official ``mcp`` SDK (the ``mcp`` extra). The worker starts it over stdio,
as ``agents.support_desk.mcp_servers.shipping`` in config/deepagents.yaml says::

    python -m agents.shipping_mcp
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("shipping")

# A stand-in for the carrier's tracking system.
PARCELS = {
    "A-1001": {"carrier": "DHL", "state": "delivered", "signed_by": "A. Lopez"},
    "A-1002": {"carrier": "UPS", "state": "lost", "last_seen": "Leipzig hub"},
}


@server.tool(description="Where the parcel of an order is, as the carrier last reported it.")
def shipping_status(order_id: str) -> dict[str, str]:
    return {"order_id": order_id, **PARCELS.get(order_id, {"state": "unknown"})}


if __name__ == "__main__":
    server.run()
