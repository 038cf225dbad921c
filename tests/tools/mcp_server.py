"""A real MCP server, written with the official ``mcp`` SDK, for the tools tests.

Run as ``python -m tests.tools.mcp_server stdio`` or ``... http PORT``. Each call of a tool
with side effects appends a line to ``$MCP_SIDE_EFFECTS`` (when set), so a test counts them.
``slow`` blocks until its ``gate`` file exists: a test kills the server while it waits.
``garbage`` lists a tool whose input schema is no schema, and its call answers a value no
JSON document holds.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from mcp import MCPError
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("deepagents-test")


def _note(line: str) -> None:
    path = os.environ.get("MCP_SIDE_EFFECTS")
    if path:
        with Path(path).open("a") as f:
            f.write(f"{os.getpid()} {line}\n")


@server.tool(description="Add two integers.")
def add(a: int, b: int) -> int:
    return a + b


@server.tool(description="Append a line to the ledger; returns its text.")
def record(text: str, ctx: Context) -> str:
    # The caller's idempotency key, from the request's _meta (deepagents sends the step key).
    meta = ctx.request_context.meta or {}
    key = dict(meta).get("io.deepagents/idempotency-key", "-")
    _note(f"record {text} {key}")
    return f"recorded {text}"


@server.tool(description="Wait until the gate file exists, then answer.")
async def slow(gate: str, label: str = "") -> str:
    _note(f"slow-start {label}")
    while not Path(gate).exists():
        await asyncio.sleep(0.02)
    _note(f"slow-end {label}")
    return f"passed {label}"


@server.tool(description="Fail with a tool error.")
def broken(reason: str) -> str:
    raise ToolError(f"broken: {reason}")


@server.tool(description="Answer with a JSON-RPC error instead of a result.")
def refuse(reason: str) -> str:
    raise MCPError(-32602, f"refused: {reason}")


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "stdio":
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))


if __name__ == "__main__":
    main()
