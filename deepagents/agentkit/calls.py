"""The innermost handlers of the chain: the model call itself and the tool call itself.

Inside a task with steps, each model call is a step (named ``model:<model>``): a later
delivery of the task gets the recorded answer instead of calling again, so the whole loop
(and every middleware's view of it) replays the same way. Tool calls are steps inside
``wrap_tool_call`` (``deepagents.tools``).
"""

from __future__ import annotations

from typing import Any

from deepagents.agentkit.middleware import ModelRequest, ModelResponse, ToolRequest
from deepagents.contract.context import active_context
from deepagents.contract.toolcalls import ToolResult
from deepagents.modelcall.wrap import wrap_model_call
from deepagents.tools.wrap import wrap_tool_call


async def call_model(request: ModelRequest) -> ModelResponse:
    """One model call through ``wrap_model_call``; a step when the task records steps."""
    ctx = active_context()
    if ctx is None:
        return await _model(request)
    recorded = await ctx.step(f"model:{request.model}", _model_json, request)
    return ModelResponse.from_json(recorded)


async def _model_json(request: ModelRequest) -> dict[str, Any]:
    return (await _model(request)).to_json()


async def _model(request: ModelRequest) -> ModelResponse:
    state = request.state
    reply = await wrap_model_call(
        request.model,
        [dict(m) for m in request.messages],
        tools=request.tools or None,
        task=state.task,
        agent=state.agent,
    )
    return ModelResponse(reply.text, reply.tool_calls, reply.model, reply.degraded)


async def call_tool(request: ToolRequest) -> ToolResult:
    """One tool call through ``wrap_tool_call``; an unknown tool is the model's error."""
    call, tool = request.call, request.tool
    if tool is None:
        message = f"no tool named {call.name!r}"
        return ToolResult(call.id, call.name, {"error": "unknown_tool", "message": message}, True)
    return await wrap_tool_call(tool, call, task=request.state.task, agent=request.state.agent)
