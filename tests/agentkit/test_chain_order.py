"""The chain's order, exactly: ``before_*`` first to last, ``after_*`` last to first, wrap
hooks nested with the first outermost; a handler called 0, 1 or N times; a middleware that
raises stops the call it guards (fail closed). Through ``run_tools`` against the model
simulator (a real HTTP server) and the session's Redis."""

from __future__ import annotations

from typing import Any

import pytest

from deepagents.agentkit import (
    AgentMiddleware,
    AgentState,
    Chain,
    Jump,
    ModelHandler,
    ModelRequest,
    ModelResponse,
    StopReason,
    ToolHandler,
    ToolRequest,
    run_tools,
)
from deepagents.agentkit.approval import Approval
from deepagents.agentkit.guardrail import Guardrail
from deepagents.config.middleware import GuardRule
from deepagents.contract.toolcalls import ToolCall, ToolResult
from deepagents.errors import ConfigError
from deepagents.modelcall import ModelCalls
from deepagents.modelcall.simulator import SimulatorThread

ASK = ToolCall("call-1", "lookup", {"q": "x"})


class Recorder(AgentMiddleware):
    """Writes each hook it runs into ``log``; the first one asks for a tool once itself."""

    def __init__(self, name: str, log: list[str], *, ask_first: bool = False) -> None:
        self.name, self.log, self.ask_first = name, log, ask_first

    async def before_agent(self, state: AgentState) -> Jump | None:
        self.log.append(f"{self.name}.before_agent")
        return None

    async def before_model(self, state: AgentState) -> Jump | None:
        self.log.append(f"{self.name}.before_model")
        return None

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> ModelResponse:
        self.log.append(f"{self.name}.wrap_model>")
        if self.ask_first and request.state.model_calls == 0:
            response = ModelResponse("", (ASK,))  # the handler is not called at all
        else:
            response = await handler(request)
        self.log.append(f"<{self.name}.wrap_model")
        return response

    async def after_model(self, state: AgentState) -> Jump | None:
        self.log.append(f"{self.name}.after_model")
        return None

    async def wrap_tool_call(self, request: ToolRequest, handler: ToolHandler) -> ToolResult:
        self.log.append(f"{self.name}.wrap_tool>")
        result = await handler(request)
        self.log.append(f"<{self.name}.wrap_tool")
        return result

    async def after_agent(self, state: AgentState) -> Jump | None:
        self.log.append(f"{self.name}.after_agent")
        return None


def _served(sim: SimulatorThread) -> int:
    return sum(1 for entry in sim.log() if entry.status == 200)


async def test_hooks_run_in_langchain_order(calls: ModelCalls, sim: SimulatorThread) -> None:
    log: list[str] = []
    chain = [Recorder("a", log, ask_first=True), Recorder("b", log), Recorder("c", log)]
    result = await run_tools(
        model="sim", messages=[{"role": "user", "content": "hi"}], middleware=chain
    )
    assert result.stop is StopReason.FINAL_ANSWER
    assert result.model_calls == 2 and result.tool_calls == 1
    assert _served(sim) == 1  # turn 1 was answered by "a" without calling its handler
    turn = ["a.before_model", "b.before_model", "c.before_model", "a.wrap_model>"]
    assert log == [
        "a.before_agent", "b.before_agent", "c.before_agent",
        # turn 1: "a" answers itself (a tool call), so b and c never see the model call
        *turn, "<a.wrap_model",
        "c.after_model", "b.after_model", "a.after_model",
        "a.wrap_tool>", "b.wrap_tool>", "c.wrap_tool>", "<c.wrap_tool", "<b.wrap_tool",
        "<a.wrap_tool",
        # turn 2: through every layer to the model and back out
        *turn, "b.wrap_model>", "c.wrap_model>", "<c.wrap_model", "<b.wrap_model",
        "<a.wrap_model",
        "c.after_model", "b.after_model", "a.after_model",
        "c.after_agent", "b.after_agent", "a.after_agent",
    ]  # fmt: skip
    # The unknown tool's answer went back to the model as an error, in the OpenAI format.
    tool_message = result.messages[2]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "call-1"
    assert "unknown_tool" in tool_message["content"]
    assert result.messages[1]["tool_calls"][0]["function"] == {
        "name": "lookup",
        "arguments": '{"q":"x"}',
    }


class Twice(AgentMiddleware):
    """Calls its handler twice (a retry) and keeps the second answer."""

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> ModelResponse:
        await handler(request)
        return await handler(request)


async def test_a_handler_may_be_called_several_times(
    calls: ModelCalls, sim: SimulatorThread
) -> None:
    log: list[str] = []
    result = await run_tools(
        model="sim",
        messages=[{"role": "user", "content": "hi"}],
        middleware=[Twice(), Recorder("inner", log)],
    )
    assert result.stop is StopReason.FINAL_ANSWER and result.text
    assert _served(sim) == 2
    assert log.count("inner.wrap_model>") == 2 and log.count("inner.after_model") == 1


class Broken(AgentMiddleware):
    name = "broken"

    async def before_model(self, state: AgentState) -> Jump | None:
        raise RuntimeError("the guard's own store is down")


class Stop(AgentMiddleware):
    async def before_model(self, state: AgentState) -> Jump | None:
        return Jump.end("enough") if state.model_calls >= 1 else None


async def test_a_middleware_that_raises_stops_the_call(
    calls: ModelCalls, sim: SimulatorThread
) -> None:
    with pytest.raises(RuntimeError, match="store is down"):
        await run_tools(
            model="sim", messages=[{"role": "user", "content": "hi"}], middleware=[Broken()]
        )
    assert _served(sim) == 0  # failed closed: the model was never called


async def test_a_jump_ends_the_loop(calls: ModelCalls, sim: SimulatorThread) -> None:
    log: list[str] = []
    result = await run_tools(
        model="sim",
        messages=[{"role": "user", "content": "hi"}],
        middleware=[Recorder("a", log, ask_first=True), Stop()],
    )
    assert result.stop is StopReason.MIDDLEWARE and result.reason == "enough"
    assert result.model_calls == 1 and _served(sim) == 0
    assert log[-1] == "a.after_agent"  # after_agent still runs


def test_an_order_the_chain_cannot_honour_is_refused_in_code() -> None:
    guard = Guardrail(deny=[GuardRule(tool="rm")])
    with pytest.raises(ConfigError, match="approval must come before guardrail") as caught:
        Chain([guard, Approval()])
    assert caught.value.field == "middleware[1]"
    Chain([Approval(), guard])  # the other way round is fine


def test_a_middleware_must_be_one() -> None:
    not_one: Any = object()
    with pytest.raises(ConfigError) as caught:
        Chain([not_one])
    assert caught.value.field == "middleware[0]"


class AlwaysTools(AgentMiddleware):
    """A model that never stops asking for a tool (answered here, without the handler)."""

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> ModelResponse:
        n = request.state.model_calls
        return ModelResponse("", (ToolCall(f"c{n}", "lookup", {"n": n}),))


async def test_max_turns_stops_and_the_last_turns_tools_do_not_run(calls: ModelCalls) -> None:
    log: list[str] = []
    result = await run_tools(
        model="sim",
        messages=[{"role": "user", "content": "hi"}],
        middleware=[Recorder("a", log), AlwaysTools()],
        max_turns=3,
    )
    assert result.stop is StopReason.MAX_TURNS
    assert (result.model_calls, result.tool_calls) == (3, 2)
    assert log.count("a.wrap_tool>") == 2
    assert result.messages[-1]["tool_calls"][0]["id"] == "c2"  # asked for, not run
