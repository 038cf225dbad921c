"""Loop detection: the same tool with the same arguments ``repeats`` times within the last
``window`` calls stops the task ``loop_detected`` (before the repeated call runs)."""

from __future__ import annotations

import hashlib
from collections import deque

import orjson

from deepagents.agentkit.middleware import AgentMiddleware, ToolHandler, ToolRequest
from deepagents.config.middleware import LoopDetectionConfig
from deepagents.contract.toolcalls import ToolCall, ToolResult
from deepagents.errors import LoopDetected


class LoopDetection(AgentMiddleware):
    name = "loop_detection"

    def __init__(self, *, repeats: int = 3, window: int = 20) -> None:
        LoopDetectionConfig(name="loop_detection", repeats=repeats, window=window)  # bounds
        self.repeats, self.window = repeats, window

    @classmethod
    def from_config(cls, config: LoopDetectionConfig) -> LoopDetection:
        return cls(repeats=config.repeats, window=config.window)

    async def wrap_tool_call(self, request: ToolRequest, handler: ToolHandler) -> ToolResult:
        memo = request.state.memo(self)
        recent: deque[str] = memo.setdefault("recent", deque(maxlen=self.window))
        key = call_hash(request.call)
        recent.append(key)
        if recent.count(key) >= self.repeats:
            raise LoopDetected(
                f"tool {request.call.name!r} asked {self.repeats} times with the same "
                f"arguments within the last {self.window} calls"
            )
        return await handler(request)


def call_hash(call: ToolCall) -> str:
    """The tool and its arguments, as a digest (key order does not matter)."""
    body = orjson.dumps([call.name, call.arguments], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(body).hexdigest()
