"""One call against the simulator: retries, Retry-After, non-retryable classes, the stall
guard, timeouts, the deadline, the input-size gate, and what the records say."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest

from deepagents.contract.result import Result
from deepagents.contract.task import Task, utcnow
from deepagents.modelcall import (
    ContentFiltered,
    ContextLengthExceeded,
    InputTooLong,
    InvalidRequest,
    ModelDeadlineExceeded,
    wrap_model_call,
)
from deepagents.modelcall.simulator import Action, SimulatorThread, count_tokens
from deepagents.modelcall.simulator import answer_words as sim_words
from tests.modelcall.conftest import MakeCalls, model_config

PROMPT = [{"role": "user", "content": "Summarise the quarterly risk report in two lines."}]


def _requests(sim: SimulatorThread) -> int:
    return len(sim.log())


async def test_503_twice_then_200(sim: SimulatorThread, make_calls: MakeCalls) -> None:
    base = 0.1
    calls = make_calls({"m": model_config(sim.url, retry={"base_s": base, "max_backoff_s": 2})})
    sim.call(lambda: sim.sim.burst(503, 2))
    reply = await wrap_model_call("m", PROMPT, calls=calls)
    assert [a.outcome for a in reply.attempts] == ["transient", "transient", "ok"]
    assert [a.status_code for a in reply.attempts] == [503, 503, 200]
    ids = [a.request_id for a in reply.attempts]
    assert len(set(ids)) == 3
    assert [e.request_id for e in sim.log()] == ids  # the server saw each fresh id
    for n, (before, after) in enumerate(
        zip(reply.attempts, reply.attempts[1:], strict=False), start=1
    ):
        ceiling = base * 2 ** (n - 1)
        assert ceiling / 2 <= after.wait_before_s <= ceiling  # the decided backoff
        gap = after.started_at - before.started_at
        assert after.wait_before_s <= gap < after.wait_before_s + 2.0  # and it was slept
    assert reply.attempts[-1].retries == 2 and not reply.degraded


async def test_429_retry_after_is_honoured(sim: SimulatorThread, make_calls: MakeCalls) -> None:
    calls = make_calls({"m": model_config(sim.url, retry={"base_s": 0.01})})
    sim.call(lambda: sim.sim.push(Action(429, retry_after_s=2.0, code="rate_limit_exceeded")))
    reply = await wrap_model_call("m", PROMPT, calls=calls)
    first, second = reply.attempts
    assert (first.outcome, first.status_code, second.outcome) == ("rate_limited", 429, "ok")
    assert second.started_at - first.started_at >= 2.0  # never earlier than asked
    log = sim.log()
    assert log[1].arrived - log[0].arrived >= 2.0


@pytest.mark.parametrize(
    ("action", "error"),
    [
        (Action(400, code="context_length_exceeded"), ContextLengthExceeded),
        (Action(400, code="content_filter"), ContentFiltered),
        (Action(400, code="invalid_request_error"), InvalidRequest),
        (Action(403, code="forbidden"), InvalidRequest),
        (Action(404, code="model_not_found"), InvalidRequest),
    ],
)
async def test_non_retryable_errors_make_exactly_one_call(
    sim: SimulatorThread, make_calls: MakeCalls, action: Action, error: type[Exception]
) -> None:
    calls = make_calls({"m": model_config(sim.url, fallback={"text": "unused"})})
    sim.call(lambda: sim.sim.push(action))
    with pytest.raises(error) as caught:
        await wrap_model_call("m", PROMPT, calls=calls)
    assert _requests(sim) == 1
    assert len(caught.value.attempts) == 1  # type: ignore[attr-defined]


async def test_spend_limit_429_is_not_retried_and_falls_back(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    calls = make_calls({"m": model_config(sim.url)})
    sim.call(lambda: sim.sim.push(Action(429, retry_after_s=1, code="insufficient_quota")))
    reply = await wrap_model_call("m", PROMPT, calls=calls, fallback="cached answer")
    assert _requests(sim) == 1
    assert (reply.text, reply.degraded, reply.reason) == (
        "cached answer",
        True,
        "provider_spend_limit",
    )


async def test_stall_mid_stream_is_aborted_and_retried(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    calls = make_calls({"m": model_config(sim.url)})  # per_token_s: the default 0.5 s
    sim.call(lambda: sim.sim.push(Action(stall_after=3, stall_s=30)))
    started = time.monotonic()
    reply = await wrap_model_call("m", PROMPT, calls=calls)
    assert time.monotonic() - started < 10  # nowhere near the 30 s stall
    stalled, ok = reply.attempts[0], reply.attempts[-1]
    assert (stalled.outcome, stalled.detail, ok.outcome) == ("transient", "stall", "ok")
    assert stalled.first_token_ms is not None  # tokens had started to flow
    # The partial text is dropped, but the tokens streamed before the stall count (billed).
    assert (stalled.tokens_out, stalled.tokens_estimated) == (3, True)
    assert reply.text == "".join(sim_words(12)) and len(sim.log()) == len(reply.attempts)


async def test_first_token_timeout(sim: SimulatorThread, make_calls: MakeCalls) -> None:
    calls = make_calls({"m": model_config(sim.url, timeouts={"first_token_s": 1.0})})
    sim.call(lambda: sim.sim.push(Action(latency_s=5)))
    reply = await wrap_model_call("m", PROMPT, calls=calls)
    first, last = reply.attempts[0], reply.attempts[-1]
    assert (first.outcome, first.detail) == ("transient", "first_token_timeout")
    assert last.outcome == "ok"


async def test_max_tokens_is_capped(sim: SimulatorThread, make_calls: MakeCalls) -> None:
    calls = make_calls({"m": model_config(sim.url, max_tokens=64)})
    await wrap_model_call("m", PROMPT, calls=calls, max_tokens=100_000)
    await wrap_model_call("m", PROMPT, calls=calls, max_tokens=10)
    assert [e.max_tokens for e in sim.log()] == [64, 10]


async def test_over_long_input_fails_fast_without_a_call(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    calls = make_calls(
        {
            "m": model_config(
                sim.url, context_tokens=100, chars_per_token=4, fallback={"text": "unused"}
            )
        }
    )
    with pytest.raises(InputTooLong, match="context limit 100 tokens"):
        await wrap_model_call("m", prompt="x" * 1000, calls=calls)
    assert _requests(sim) == 0  # refused before any request: nothing to wait for


async def test_no_call_starts_that_cannot_finish_before_the_deadline(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    # Calls to this model take 5 s (min_attempt_s says so); the task has 2 s left.
    calls = make_calls({"slow": model_config(sim.url, timeouts={"min_attempt_s": 5})})
    sim.call(lambda: sim.sim.configure(latency_s=5))
    task = Task(intent="research", deadline=utcnow() + timedelta(seconds=2))
    reply = await wrap_model_call("slow", PROMPT, calls=calls, task=task, fallback="later")
    assert (reply.text, reply.degraded, reply.reason) == ("later", True, "deadline")
    with pytest.raises(ModelDeadlineExceeded) as caught:
        await wrap_model_call("slow", PROMPT, calls=calls, task=task)
    assert caught.value.code == "deadline_exceeded"
    assert _requests(sim) == 0  # answered without a call, so at once


async def test_attempts_are_bounded_by_the_time_left(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    calls = make_calls({"m": model_config(sim.url, timeouts={"min_attempt_s": 0.5})})
    sim.call(lambda: sim.sim.configure(latency_s=30))  # every attempt would take 30 s
    deadline = utcnow() + timedelta(seconds=1.5)
    # Cut at the deadline (1.5 s), not after the 30 s reply: wait_for fails the test first.
    started = time.monotonic()
    with pytest.raises(ModelDeadlineExceeded):
        await asyncio.wait_for(
            wrap_model_call("m", PROMPT, calls=calls, deadline=deadline, stream=False), 15
        )
    print(f"\ndeadline 1.5 s away: the call was cut after {time.monotonic() - started:.2f} s")
    assert utcnow() >= deadline - timedelta(seconds=0.5)  # and not given up long before it
    assert _requests(sim) == 1  # no retry was started without time to finish


async def test_tokens_and_cost_follow_the_price_table(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    calls = make_calls({"m": model_config(sim.url, price_in_per_1k=0.5, price_out_per_1k=1.5)})
    reply = await wrap_model_call("m", PROMPT, calls=calls, agent="research")
    tokens_in, tokens_out = count_tokens(PROMPT), 12
    expected = round(tokens_in * 0.5 / 1000 + tokens_out * 1.5 / 1000, 6)
    assert (reply.tokens_in, reply.tokens_out, reply.cost_usd) == (tokens_in, tokens_out, expected)
    attempt = reply.attempts[0]
    assert attempt.model_version == "sim-1" and not attempt.tokens_estimated
    assert attempt.connect_ms is not None and attempt.first_token_ms is not None
    assert 0 <= attempt.first_token_ms <= (attempt.total_ms or 0)
    result = reply.apply(Result(output="x"))
    assert result.metrics.tokens_used == tokens_in + tokens_out
    assert result.metrics.cost_usd == expected
    assert result.metrics.model_extra == {"model": "m"}
    registry = calls.metrics.registry
    labels = {"model": "m", "agent": "research"}
    assert registry.get_sample_value("deepagents_model_cost_usd_total", labels) == expected
    assert (
        registry.get_sample_value("deepagents_model_tokens_total", {**labels, "direction": "out"})
        == tokens_out
    )


async def test_tokens_are_estimated_when_usage_is_absent(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    calls = make_calls({"m": model_config(sim.url)})
    sim.call(lambda: sim.sim.configure(omit_usage=True))
    reply = await wrap_model_call("m", PROMPT, calls=calls, stream=False)
    attempt = reply.attempts[0]
    assert attempt.tokens_estimated and attempt.tokens_in == count_tokens(PROMPT)
    assert attempt.tokens_out > 0
