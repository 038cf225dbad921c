"""The Anthropic Messages API provider against the simulator speaking it: answers plain and
streamed, usage and cost, the key in ``x-api-key``, tool use with the history translated
from the OpenAI format (system prompt, tool results as ``tool_result`` blocks), and its
error shapes through the same retries and classes as the OpenAI provider's."""

from __future__ import annotations

from typing import Any

import pytest

from deepagents.contract.toolcalls import ToolCall, ToolDefinition
from deepagents.modelcall import (
    ContextLengthExceeded,
    InvalidRequest,
    ModelUnavailable,
    wrap_model_call,
)
from deepagents.modelcall.providers.anthropic_format import anthropic_request
from deepagents.modelcall.record import FinishReason
from deepagents.modelcall.simulator import Action, Api, SimulatorThread, answer_words
from tests.modelcall.conftest import MakeCalls, model_config

WEATHER = ToolDefinition(
    "get_weather",
    "The weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}},
)
PRICES = {"price_in_per_1k": 0.003, "price_out_per_1k": 0.015}


def _claude(url: str, **overrides: Any) -> Any:
    return model_config(url, provider="anthropic", model="claude-sim", **overrides)


@pytest.mark.parametrize("stream", [False, True])
async def test_an_answer_with_usage_cost_and_the_key(
    sim: SimulatorThread, make_calls: MakeCalls, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    monkeypatch.setenv("SIM_ANTHROPIC_KEY", "sk-ant-sim")
    sim.call(lambda: sim.sim.configure(require_key=True))
    sim.call(lambda: sim.sim.issue_key("sk-ant-sim"))
    model = _claude(sim.url, stream=stream, api_key_env="SIM_ANTHROPIC_KEY", **PRICES)
    calls = make_calls({"claude": model})
    messages = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Say something."},
    ]
    reply = await wrap_model_call("claude", messages, calls=calls, max_tokens=5)
    assert reply.text == "".join(answer_words(5))
    assert (reply.finish_reason, reply.tool_calls, reply.degraded) == (FinishReason.STOP, (), False)
    (attempt,) = reply.attempts
    (logged,) = sim.log()
    assert (logged.api, logged.model, logged.max_tokens, logged.key_ok) == (
        Api.ANTHROPIC,
        "claude-sim",
        5,
        True,
    )
    assert (attempt.outcome, attempt.detail, attempt.tokens_estimated) == ("ok", "end_turn", False)
    assert (attempt.tokens_in, attempt.tokens_out) == (logged.prompt_tokens, 5)
    assert attempt.cost_usd == round(logged.prompt_tokens * 0.003 / 1000 + 5 * 0.015 / 1000, 6)


async def test_a_wrong_key_is_refused_as_authentication(
    sim: SimulatorThread, make_calls: MakeCalls, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIM_ANTHROPIC_KEY", "sk-ant-wrong")
    sim.call(lambda: sim.sim.configure(require_key=True))
    calls = make_calls({"claude": _claude(sim.url, api_key_env="SIM_ANTHROPIC_KEY")})
    with pytest.raises(ModelUnavailable) as caught:
        await wrap_model_call("claude", prompt="q", calls=calls)
    assert caught.value.reason == "auth_failed"
    # One credential refresh and one retry, as for every provider; then it moves on.
    assert [(a.outcome, a.status_code, a.detail) for a in caught.value.attempts] == [
        ("auth", 401, "authentication_error")
    ] * 2


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_use_and_results_fed_back(
    sim: SimulatorThread, make_calls: MakeCalls, stream: bool
) -> None:
    calls = make_calls({"claude": _claude(sim.url, stream=stream)})
    history: list[dict[str, Any]] = [
        {"role": "system", "content": 'sim: call get_weather {"city": "Lyon"}\nsim: then'},
        {"role": "user", "content": "Weather in Lyon?"},
    ]
    first = await wrap_model_call("claude", history, tools=[WEATHER], calls=calls)
    assert first.tool_calls == (ToolCall("toolu_0_0", "get_weather", {"city": "Lyon"}),)
    assert first.finish_reason is FinishReason.TOOL_CALLS
    assert first.attempts[0].detail == "tool_use"
    assert sim.log()[0].tools == ("get_weather",)
    history += [
        first.as_message(),
        {"role": "tool", "tool_call_id": "toolu_0_0", "content": "sunny, 24 C"},
    ]
    final = await wrap_model_call("claude", history, tools=[WEATHER], calls=calls)
    # The system prompt went out as `system`, the result as a tool_result block: the
    # simulated model read both back.
    assert final.text == "tool results: get_weather=sunny, 24 C"
    assert (final.tool_calls, final.finish_reason) == ((), FinishReason.STOP)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_bad_tool_use_never_reaches_the_caller(
    sim: SimulatorThread, make_calls: MakeCalls, stream: bool
) -> None:
    calls = make_calls({"claude": _claude(sim.url, stream=stream, retry={"max_retries": 0})})
    for script in ("sim: call get_weather [1]", "sim: call rm_rf {}", "sim: call get_weather {"):
        with pytest.raises(ModelUnavailable) as caught:
            await wrap_model_call("claude", prompt=script, tools=[WEATHER], calls=calls)
        (attempt,) = caught.value.attempts
        assert attempt.outcome == "bad_tool_call", script


async def test_529_overloaded_then_an_answer(sim: SimulatorThread, make_calls: MakeCalls) -> None:
    calls = make_calls({"claude": _claude(sim.url)})
    sim.call(lambda: sim.sim.burst(529, 2, code="overloaded_error"))
    reply = await wrap_model_call("claude", prompt="q", calls=calls)
    assert [(a.outcome, a.status_code, a.detail) for a in reply.attempts] == [
        ("transient", 529, "overloaded_error"),
        ("transient", 529, "overloaded_error"),
        ("ok", 200, "end_turn"),
    ]


async def test_429_rate_limit_waits_for_retry_after(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    calls = make_calls({"claude": _claude(sim.url, retry={"base_s": 0.01})})
    sim.call(lambda: sim.sim.push(Action(429, retry_after_s=1.0, code="rate_limit_error")))
    reply = await wrap_model_call("claude", prompt="q", calls=calls)
    first, second = reply.attempts
    assert (first.outcome, first.detail, second.outcome) == (
        "rate_limited",
        "rate_limit_error",
        "ok",
    )
    assert second.started_at - first.started_at >= 1.0


@pytest.mark.parametrize(
    ("action", "error", "reason"),
    [
        (Action(400, code="invalid_request_error"), InvalidRequest, "invalid"),
        (Action(402, code="billing_error"), ModelUnavailable, "provider_spend_limit"),
    ],
)
async def test_errors_no_retry_can_fix_make_one_call(
    sim: SimulatorThread,
    make_calls: MakeCalls,
    action: Action,
    error: type[Exception],
    reason: str,
) -> None:
    calls = make_calls({"claude": _claude(sim.url)})
    sim.call(lambda: sim.sim.push(action))
    with pytest.raises(error) as caught:
        await wrap_model_call("claude", prompt="q", calls=calls)
    assert getattr(caught.value, "reason", None) == reason
    assert len(sim.log()) == 1


async def test_prompt_too_long_is_context_length(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    sim.call(lambda: sim.sim.configure(context_tokens=40))
    calls = make_calls({"claude": _claude(sim.url)})
    with pytest.raises(ContextLengthExceeded):
        await wrap_model_call("claude", prompt="long " * 100, calls=calls)
    assert len(sim.log()) == 1


async def test_an_error_event_mid_stream_is_retried_and_billed(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    # The API can fail after its 200: an `error` event ends the stream.
    calls = make_calls({"claude": _claude(sim.url, stream=True, **PRICES)})
    sim.call(lambda: sim.sim.push(Action(error_after=3)))
    reply = await wrap_model_call("claude", prompt="q", calls=calls)
    broken, ok = reply.attempts
    assert (broken.outcome, broken.detail, broken.tokens_out) == (
        "transient",
        "overloaded_error",
        3,
    )
    assert broken.cost_usd > 0  # what was generated before the error is billed
    assert (ok.outcome, reply.text) == ("ok", "".join(answer_words(12)))


def test_the_history_is_translated_to_messages() -> None:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Two cities?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "w", "arguments": "{}"}},
                {"id": "b", "type": "function", "function": {"name": "w", "arguments": '{"x":1}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "sun"},
        {"role": "tool", "tool_call_id": "b", "content": {"error": "down"}, "is_error": True},
        {"role": "user", "content": "And so?"},
    ]
    request = anthropic_request(history, [WEATHER])
    assert request["system"] == "Be terse."
    assert request["tools"] == [
        {
            "name": "get_weather",
            "description": WEATHER.description,
            "input_schema": WEATHER.parameters,
        }
    ]
    assert request["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Two cities?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "a", "name": "w", "input": {}},
                {"type": "tool_use", "id": "b", "name": "w", "input": {"x": 1}},
            ],
        },
        {  # the results and the next question: one user turn, as turns must alternate
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "sun"},
                {
                    "type": "tool_result",
                    "tool_use_id": "b",
                    "content": '{"error":"down"}',
                    "is_error": True,
                },
                {"type": "text", "text": "And so?"},
            ],
        },
    ]


async def test_an_untranslatable_history_is_refused_before_sending(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    calls = make_calls({"claude": _claude(sim.url)})
    bad_call = {"id": "a", "type": "function", "function": {"name": "w", "arguments": "[1]"}}
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [bad_call]},
    ]
    with pytest.raises(InvalidRequest):
        await wrap_model_call("claude", history, calls=calls)
    assert sim.log() == []
