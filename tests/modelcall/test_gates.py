"""Gates shared in Redis: the circuit breaker, budgets and quotas, and the fallback chain."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from deepagents.contract.result import Result
from deepagents.modelcall import ModelCalls, ModelUnavailable, wrap_model_call
from deepagents.modelcall.simulator import SimulatorThread
from deepagents.store.models.gates import BreakerState
from tests.modelcall.conftest import MakeCalls, model_config
from tests.support.wait import eventually

BREAKER = {
    "breaker": {"min_calls": 4, "failure_rate": 0.5, "window_s": 30, "cooldown_s": 1.0},
    "retry": {"max_retries": 0},
}


async def _cooled_down(client: Redis, calls: ModelCalls, name: str) -> None:
    """Wait (on Redis's clock, which the breaker uses) until the cool-down has passed."""
    key = calls.runtime(name).keys.breaker

    async def passed() -> bool:
        opened = int(await client.hget(key, "opened_at") or 0)
        seconds, micros = await client.time()
        return seconds * 1000 + micros // 1000 >= opened + 1000

    await eventually(passed, timeout=10, what="breaker cool-down")


async def test_breaker_opens_then_one_probe_closes_it(
    sim: SimulatorThread, make_calls: MakeCalls, client: Redis
) -> None:
    calls = make_calls({"m": model_config(sim.url, **BREAKER)})
    breaker = calls.runtime("m").breaker
    sim.call(lambda: sim.sim.burst(503, 4))
    for _ in range(4):
        with pytest.raises(ModelUnavailable):
            await wrap_model_call("m", prompt="q", calls=calls)
    assert await breaker.state() is BreakerState.OPEN
    # Open: no call reaches the server.
    for _ in range(5):
        reply = await wrap_model_call("m", prompt="q", calls=calls, fallback="fb")
        assert (reply.degraded, reply.reason) == (True, "circuit_open")
    assert len(sim.log()) == 4

    await _cooled_down(client, calls, "m")
    # Half-open: of ten concurrent calls exactly one (the probe) goes through.
    sim.call(lambda: sim.sim.configure(latency_s=1.0))  # the probe is slow: others see it
    replies = await asyncio.gather(
        *(wrap_model_call("m", prompt="q", calls=calls, fallback="fb") for _ in range(10))
    )
    answered = [r for r in replies if not r.degraded]
    assert len(answered) == 1 and len(sim.log()) == 5
    assert {r.reason for r in replies if r.degraded} == {"circuit_open"}
    # The probe succeeded: closed again, calls flow.
    assert await breaker.state() is BreakerState.CLOSED
    sim.call(lambda: sim.sim.configure(latency_s=0.0))
    reply = await wrap_model_call("m", prompt="q", calls=calls)
    assert not reply.degraded and len(sim.log()) == 6


async def test_failed_probe_reopens(
    sim: SimulatorThread, make_calls: MakeCalls, client: Redis
) -> None:
    calls = make_calls({"m": model_config(sim.url, **BREAKER)})
    sim.call(lambda: sim.sim.burst(503, 5))
    for _ in range(4):
        await wrap_model_call("m", prompt="q", calls=calls, fallback="fb")
    await _cooled_down(client, calls, "m")
    probe = await wrap_model_call("m", prompt="q", calls=calls, fallback="fb")
    assert probe.attempts[-1].status_code == 503
    assert await calls.runtime("m").breaker.state() is BreakerState.OPEN
    refused = await wrap_model_call("m", prompt="q", calls=calls, fallback="fb")
    assert refused.reason == "circuit_open" and len(sim.log()) == 5


async def test_breaker_is_shared_by_the_fleet(sim: SimulatorThread, make_calls: MakeCalls) -> None:
    worker_a = make_calls({"m": model_config(sim.url, **BREAKER)})
    worker_b = make_calls({"m": model_config(sim.url, **BREAKER)})
    sim.call(lambda: sim.sim.burst(503, 4))
    for _ in range(4):
        await wrap_model_call("m", prompt="q", calls=worker_a, fallback="fb")
    reply = await wrap_model_call("m", prompt="q", calls=worker_b, fallback="fb")
    assert reply.reason == "circuit_open" and len(sim.log()) == 4


async def test_budget_exhausted_uses_the_fallback(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    # A call reserves its worst case, 0.059 USD (19 input tokens at most, 20 out); it costs
    # 0.031 USD. The daily budget of 0.07 USD admits the first, not a second.
    model = model_config(
        sim.url,
        price_in_per_1k=1.0,
        price_out_per_1k=2.0,
        max_tokens=20,
        limits={"daily_budget_usd": 0.07},
        fallback={"text": "budget spent: cached summary"},
    )
    calls = make_calls({"m": model})
    first = await wrap_model_call("m", prompt="hello there", calls=calls)
    assert not first.degraded and first.cost_usd == 0.031
    second = await wrap_model_call("m", prompt="hello there", calls=calls)
    assert (second.text, second.degraded, second.reason, second.model) == (
        "budget spent: cached summary",
        True,
        "budget_exhausted",
        None,
    )
    assert second.attempts[0].detail == "budget_exhausted" and second.calls == 0
    assert len(sim.log()) == 1
    result = second.apply(Result(output=second.text))
    assert result.degraded
    assert await calls.runtime("m").budget.spent_usd() == first.cost_usd


async def test_budget_refusal_without_fallback_is_a_clear_error(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    calls = make_calls({"m": model_config(sim.url, limits={"daily_budget_usd": 0})})
    with pytest.raises(ModelUnavailable, match="m:budget_exhausted"):
        await wrap_model_call("m", prompt="q", calls=calls)
    assert len(sim.log()) == 0


async def test_request_quota_per_tenant(sim: SimulatorThread, make_calls: MakeCalls) -> None:
    calls = make_calls(
        {"m": model_config(sim.url, limits={"tenant_daily_requests": 2, "daily_requests": 4})}
    )
    for _ in range(2):
        assert not (
            await wrap_model_call("m", prompt="q", calls=calls, tenant="acme", fallback="fb")
        ).degraded
    third = await wrap_model_call("m", prompt="q", calls=calls, tenant="acme", fallback="fb")
    assert third.reason == "tenant_quota_exhausted"
    other = await wrap_model_call("m", prompt="q", calls=calls, tenant="globex", fallback="fb")
    assert not other.degraded
    await wrap_model_call("m", prompt="q", calls=calls, tenant="initech", fallback="fb")
    model_quota = await wrap_model_call("m", prompt="q", calls=calls, tenant="x", fallback="fb")
    assert model_quota.reason == "quota_exhausted"
    assert len(sim.log()) == 4


async def test_open_circuit_falls_back_down_the_chain(
    sim: SimulatorThread, make_calls: MakeCalls
) -> None:
    primary = model_config(
        sim.url,
        model="model-a",
        fallbacks=("backup",),
        breaker={"min_calls": 2, "failure_rate": 0.5, "cooldown_s": 60},
        retry={"max_retries": 0},
    )
    with SimulatorThread() as backup_sim:
        calls = make_calls(
            {"primary": primary, "backup": model_config(backup_sim.url, model="model-b")}
        )
        sim.call(lambda: sim.sim.configure(error_rate=1.0))  # the primary is down
        for _ in range(2):  # primary fails; the backup answers each time
            reply = await wrap_model_call("primary", prompt="q", calls=calls)
            assert (reply.model, reply.reason) == ("backup", "retries_exhausted")
        assert len(sim.log()) == 2
        reply = await wrap_model_call("primary", prompt="q", calls=calls)
        assert (reply.model, reply.requested_model, reply.reason) == (
            "backup",
            "primary",
            "circuit_open",
        )
        assert reply.degraded and len(sim.log()) == 2  # the primary was not called again
        assert [e.model for e in backup_sim.log()] == ["model-b"] * 3
    result = reply.apply(Result(output=reply.text))
    assert result.metrics.model_extra == {"model": "backup"} and result.degraded
