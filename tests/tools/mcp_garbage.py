"""A hostile MCP server over stdio: it completes the handshake and then answers garbage.

``python -m tests.tools.mcp_garbage MODE``. Modes: ``schema`` (tools/list gives an input
schema that is no schema), ``result`` (tools/call answers a result of the wrong shape),
``noise`` (tools/call answers a line that is not JSON, then nothing). Written by hand on
purpose: the SDK's server would refuse to send any of this.
"""

from __future__ import annotations

import json
import sys
from typing import Any

_TOOL = {"name": "echo", "description": "echo", "inputSchema": {"type": "object"}}


def _answer(msg: dict[str, Any], result: Any) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result})


def _reply(msg: dict[str, Any], mode: str) -> str | None:
    method = msg.get("method")
    if "id" not in msg:
        return None  # a notification
    if method == "initialize":
        return _answer(
            msg,
            {
                "protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "garbage", "version": "0"},
            },
        )
    if method == "tools/list":
        tool = dict(_TOOL)
        if mode == "schema":
            tool["inputSchema"] = {"type": "object", "properties": {"x": {"type": 12}}}
        return _answer(msg, {"tools": [tool]})
    if method == "tools/call":
        if mode == "noise":
            return "this is not json {"
        return _answer(msg, {"content": "not a list", "isError": "maybe"})
    err = {"code": -32601, "message": f"no method {method}"}
    return json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": err})


def main() -> None:
    mode = sys.argv[1]
    for line in sys.stdin:
        out = _reply(json.loads(line), mode)
        if out is not None:
            sys.stdout.write(out + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
