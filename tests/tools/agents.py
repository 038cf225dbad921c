"""An agent that calls tools, for the crash-durability test (until the tool-calling loop
lands, it calls ``wrap_tool_call`` directly in ``execute``).

Payload: ``effects`` (a file), ``gate`` (a file), ``calls`` (how many). It calls the
Python tool ``effect`` ``calls`` times, then ``effect_then_wait`` (its effect, then it
waits for the gate: a kill there leaves a call in flight), then the MCP server ``local``'s
``record`` tool, then ``effect`` once more. Each effect is one line ``<n> <pid> <key>``
appended to the file; the MCP server writes its own line there too.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from deepagents import AgentContract, Result
from deepagents.contract.result import ErrorCode
from deepagents.contract.toolcalls import ToolCall
from deepagents.tools import tool, wrap_tool_call
from deepagents.tools.mcp import mcp_tools


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@tool
def effect(path: str, n: int, idempotency_key: str | None = None) -> dict[str, int]:
    """Write one side effect."""
    _append(path, f"{n} {os.getpid()} {idempotency_key}\n")
    return {"n": n, "pid": os.getpid()}


@tool(timeout_s=120)
async def effect_then_wait(
    path: str, n: int, gate: str, idempotency_key: str | None = None
) -> dict[str, int]:
    """Write one side effect, then wait for the gate file."""
    _append(path, f"{n} {os.getpid()} {idempotency_key}\n")
    while not Path(gate).exists():
        await asyncio.sleep(0.02)
    return {"n": n, "pid": os.getpid()}


class ToolsAgent(AgentContract):
    name = "toolsagent"
    version = "1"
    intents = ("use_tools",)

    async def execute(self, context: dict[str, Any]) -> Result:
        task, payload = context["task"], context["payload"]
        path, gate, calls = payload["effects"], payload["gate"], int(payload["calls"])
        outputs = []
        for n in range(1, calls + 1):
            call = ToolCall(f"c{n}", "effect", {"path": path, "n": n})
            outputs.append(await wrap_tool_call(effect, call, task=task, agent=self.name))
        n = calls + 1
        call = ToolCall(f"c{n}", "effect_then_wait", {"path": path, "n": n, "gate": gate})
        outputs.append(await wrap_tool_call(effect_then_wait, call, task=task, agent=self.name))
        record = next(t for t in await mcp_tools("local") if t.name == "record")
        call = ToolCall("mcp", "record", {"text": "from-agent"})
        outputs.append(await wrap_tool_call(record, call, task=task, agent=self.name))
        call = ToolCall("last", "effect", {"path": path, "n": n + 1})
        outputs.append(await wrap_tool_call(effect, call, task=task, agent=self.name))
        failed = [o for o in outputs if o.is_error]
        if failed:
            return Result.failed(ErrorCode.TOOL_ERROR, str(failed[0].content))
        return Result(output={"results": [o.content for o in outputs], "pid": os.getpid()})
