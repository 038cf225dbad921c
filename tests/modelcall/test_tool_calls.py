"""Tool calls through ``wrap_model_call`` against the simulator: tools are sent, the calls
the model asks for come back checked (plain, and assembled from stream deltas), the reply's
assistant message goes into the history, the results fed back reach the model, and a bad
call (not JSON, not an object, too large, a tool not offered) never reaches the caller."""

from __future__ import annotations

from typing import Any

import pytest

from deepagents.contract.toolcalls import ToolCall, ToolDefinition
from deepagents.modelcall import ContextLengthExceeded, ModelUnavailable, wrap_model_call
from deepagents.modelcall.record import FinishReason
from deepagents.modelcall.simulator import SimulatorThread
from tests.modelcall.conftest import MakeCalls, model_config

WEATHER = ToolDefinition(
    "get_weather",
    "The weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
TIME = ToolDefinition("get_time", "The time now.")


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "You are terse."}, {"role": "user", "content": text}]


def _tool_message(call: ToolCall, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call.id, "content": content}


@pytest.mark.parametrize("stream", [False, True])
async def test_a_tool_call_then_the_results_fed_back(
    sim: SimulatorThread, make_calls: MakeCalls, stream: bool
) -> None:
    calls = make_calls({"m": model_config(sim.url, stream=stream)})
    history = _user('What is the weather?\nsim: call get_weather {"city": "Paris"}')
    first = await wrap_model_call("m", history, tools=[WEATHER, TIME], calls=calls)
    assert first.tool_calls == (ToolCall("call_0_0", "get_weather", {"city": "Paris"}),)
    assert (first.text, first.finish_reason) == ("", FinishReason.TOOL_CALLS)
    assert sim.log()[0].tools == ("get_weather", "get_time")  # the tools went out
    message = first.as_message()
    assert message == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_0_0",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            }
        ],
    }
    history += [message, _tool_message(first.tool_calls[0], '{"temp_c": 21}')]
    final = await wrap_model_call("m", history, tools=[WEATHER, TIME], calls=calls)
    assert final.tool_calls == ()
    assert final.finish_reason is FinishReason.STOP
    assert final.text == 'tool results: get_weather={"temp_c": 21}'
    assert final.as_message() == {"role": "assistant", "content": final.text}
    assert [a.outcome for a in (*first.attempts, *final.attempts)] == ["ok", "ok"]
    assert final.tokens_in > first.tokens_in  # the history grew by the call and its result


@pytest.mark.parametrize("stream", [False, True])
async def test_parallel_calls_over_turns_assembled_in_order(
    sim: SimulatorThread, make_calls: MakeCalls, stream: bool
) -> None:
    calls = make_calls({"m": model_config(sim.url, stream=stream)})
    long_city = "Llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch"
    script = (
        f'sim: call get_weather {{"city": "{long_city}", "units": "metric"}}\n'
        "sim: call get_time\n"
        "sim: then\n"
        'sim: call get_weather {"city": "Oslo"}\n'
        "sim: say Done."
    )
    history = _user(script)
    first = await wrap_model_call("m", history, tools=[WEATHER, TIME], calls=calls)
    assert first.tool_calls == (
        ToolCall("call_0_0", "get_weather", {"city": long_city, "units": "metric"}),
        ToolCall("call_0_1", "get_time", {}),
    )
    history += [first.as_message(), *(_tool_message(c, "ok") for c in first.tool_calls)]
    second = await wrap_model_call("m", history, tools=[WEATHER, TIME], calls=calls)
    assert second.tool_calls == (ToolCall("call_1_0", "get_weather", {"city": "Oslo"}),)
    history += [second.as_message(), _tool_message(second.tool_calls[0], "ok")]
    third = await wrap_model_call("m", history, tools=[WEATHER, TIME], calls=calls)
    assert (third.text, third.tool_calls, third.finish_reason) == ("Done.", (), FinishReason.STOP)


async def test_a_directive_in_the_system_prompt_repeats(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    calls = make_calls({"m": model_config(sim.url)})
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "sim: call get_time\nsim: repeat"},
        {"role": "user", "content": "Keep checking the time."},
    ]
    for turn in range(3):
        reply = await wrap_model_call("m", history, tools=[TIME], calls=calls)
        assert reply.tool_calls == (ToolCall(f"call_{turn}_0", "get_time", {}),)
        history += [reply.as_message(), _tool_message(reply.tool_calls[0], "12:00")]


BAD_CALLS = [
    ("sim: call get_weather [1, 2]", "arguments are not a JSON object"),
    ('sim: call get_weather {"city": ', "arguments are not JSON"),
    ("sim: call delete_everything {}", "names a tool that was not offered"),
    ('sim: call get_weather {"city": "' + "x" * 200 + '"}', "arguments over 128 bytes"),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("script", "why"), BAD_CALLS)
async def test_a_bad_tool_call_never_reaches_the_caller(
    sim: SimulatorThread, make_calls: MakeCalls, stream: bool, script: str, why: str
) -> None:
    model = model_config(sim.url, stream=stream, max_tool_call_bytes=128, retry={"max_retries": 1})
    calls = make_calls({"m": model})
    with pytest.raises(ModelUnavailable) as caught:
        await wrap_model_call("m", _user(script), tools=[WEATHER], calls=calls)
    assert caught.value.reason == "bad_tool_call"
    attempts = caught.value.attempts
    # Asked again once (sampling may do better), then given up; the breaker is not fed.
    assert [(a.outcome, a.detail) for a in attempts] == [
        ("bad_tool_call", f"bad_tool_call: {why}")
    ] * 2
    assert len(sim.log()) == 2


async def test_a_bad_tool_call_answers_the_declared_fallback(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    calls = make_calls({"m": model_config(sim.url, retry={"max_retries": 0})})
    reply = await wrap_model_call(
        "m", _user("sim: call nope"), tools=[WEATHER], calls=calls, fallback="no tools today"
    )
    assert (reply.degraded, reply.reason, reply.text) == (
        True,
        "bad_tool_call",
        "no tools today",
    )
    assert reply.tool_calls == () and reply.finish_reason is FinishReason.STOP


async def test_the_simulated_context_window_is_enforced(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    sim.call(lambda: sim.sim.configure(context_tokens=50))
    calls = make_calls({"m": model_config(sim.url)})
    assert (await wrap_model_call("m", prompt="short", calls=calls)).text
    with pytest.raises(ContextLengthExceeded):
        await wrap_model_call("m", prompt="long " * 100, calls=calls)
