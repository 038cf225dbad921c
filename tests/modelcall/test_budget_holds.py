"""Budgets and quotas hold under concurrency: each call holds its worst case before it goes
out, so concurrent calls never together pass a limit; the hold of a process killed with
kill -9 expires. Against the tests' own server (``hostile_server``) and a real Redis."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from deepagents.modelcall import wrap_model_call
from deepagents.store.models.budget import holds_key
from deepagents.store.models.gates import Budget
from deepagents.store.models.keys import ModelKeys
from tests.modelcall.conftest import FAST, PROVIDERS, MakeCalls, model_config
from tests.modelcall.fleet import ROOT, run_fleet
from tests.modelcall.hostile_server import HostileServer
from tests.support.wait import eventually

# A call's worst case and its actual cost are both 0.1 USD: the server reports max_tokens
# (100) completion tokens, at 1 USD per 1,000; input is free. A budget of 2.5 calls admits 2.
PRICES = {"price_in_per_1k": 0.0, "price_out_per_1k": 1.0, "max_tokens": 100, "stream": False}
CALL_USD = 0.1


@pytest.fixture
def server() -> Iterator[HostileServer]:
    with HostileServer() as running:
        yield running


def _day_key(prefix: str) -> str:
    return ModelKeys(prefix, "m").day(Budget.today())


async def _field(client: Redis, prefix: str, name: str) -> int:
    return int(await client.hget(_day_key(prefix), name) or 0)


class SpendWatch:
    """Samples the recorded spend of a scope while calls run: its highest value."""

    def __init__(self, client: Redis, prefix: str, field: str) -> None:
        self.client, self.prefix, self.field = client, prefix, field
        self.highest = 0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> SpendWatch:
        self._task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        await self._read()

    async def _read(self) -> None:
        self.highest = max(self.highest, await _field(self.client, self.prefix, self.field))

    async def _sample(self) -> None:
        while True:
            await self._read()
            await asyncio.sleep(0.002)


SCOPES = {
    "model_budget": ({"daily_budget_usd": 2.5 * CALL_USD}, "spend", "budget_exhausted"),
    "tenant_budget": (
        {"tenant_daily_budget_usd": 2.5 * CALL_USD},
        "t:acme:spend",
        "tenant_budget_exhausted",
    ),
    "agent_budget": (
        {"agent_daily_budget_usd": 2.5 * CALL_USD},
        "a:research:spend",
        "agent_budget_exhausted",
    ),
    "model_quota": ({"daily_requests": 2}, "req", "quota_exhausted"),
    "tenant_quota": ({"tenant_daily_requests": 2}, "t:acme:req", "tenant_quota_exhausted"),
    "agent_quota": ({"agent_daily_requests": 2}, "a:research:req", "agent_quota_exhausted"),
}


@pytest.mark.parametrize("calls_at_once", [20, 200])
@pytest.mark.parametrize("scope", sorted(SCOPES))
async def test_concurrent_calls_never_pass_a_budget(
    server: HostileServer,
    make_calls: MakeCalls,
    client: Redis,
    prefix: str,
    scope: str,
    calls_at_once: int,
) -> None:
    limits, field, reason = SCOPES[scope]
    limit = 2.5 * CALL_USD * 1_000_000 if field.endswith("spend") else 2
    calls = make_calls({"m": model_config(server.url("perchar1"), **PRICES, limits=limits)})
    async with SpendWatch(client, prefix, field) as watch:
        replies = await asyncio.gather(
            *(
                wrap_model_call(
                    "m", prompt="q", calls=calls, tenant="acme", agent="research", fallback="fb"
                )
                for _ in range(calls_at_once)
            )
        )
    answered = [r for r in replies if not r.degraded]
    assert len(answered) == 2, [r.reason for r in replies]
    assert {r.reason for r in replies if r.degraded} == {reason}
    assert len(server.log("perchar")) == 2  # refused calls never reached the server
    assert watch.highest <= limit
    assert await calls.runtime("m").budget.spent_usd() == pytest.approx(2 * CALL_USD)
    # Every hold was settled: nothing stays held.
    assert await _field(client, prefix, "held") == 0
    assert await _field(client, prefix, "hreq") == 0
    assert await client.zcard(holds_key(_day_key(prefix))) == 0


async def test_two_hundred_calls_from_two_processes(
    server: HostileServer, client: Redis, redis_url: str, prefix: str
) -> None:
    model = {
        "base_url": server.url("perchar1"),
        **FAST,
        **PRICES,
        "limits": {"daily_budget_usd": 2.5 * CALL_USD},
    }
    spec = {
        "redis_url": redis_url,
        "prefix": prefix,
        "models": {"m": model},
        "model": "m",
        "prompt": "q",
        "calls": 100,
        "fallback": "fb",
    }
    async with SpendWatch(client, prefix, "spend") as watch:
        summaries = await run_fleet(client, spec, processes=2)
    results = [r for s in summaries for r in s["results"]]
    assert len(results) == 200
    assert sum(r["ok"] for r in results) == 2
    assert {r["reason"] for r in results if not r["ok"]} == {"budget_exhausted"}
    assert len(server.log("perchar")) == 2
    assert watch.highest <= 2.5 * CALL_USD * 1_000_000
    assert await _field(client, prefix, "spend") == 2 * CALL_USD * 1_000_000


async def test_a_failed_call_releases_its_hold(
    server: HostileServer, make_calls: MakeCalls, client: Redis, prefix: str
) -> None:
    # Budget for 1.5 calls: a call that fails must give its hold back, or the next is refused.
    limits = {"daily_budget_usd": 1.5 * CALL_USD}
    failing = make_calls(
        {
            "m": model_config(
                server.url("hang1"),
                **PRICES,
                limits=limits,
                retry={"max_retries": 0},
                timeouts={"total_s": 5, "attempt_s": 0.5},
            )
        }
    )
    failed = await wrap_model_call("m", prompt="q", calls=failing, fallback="fb")
    assert (failed.degraded, failed.reason) == (True, "retries_exhausted")
    assert await _field(client, prefix, "held") == 0
    assert await _field(client, prefix, "spend") == 0
    assert await _field(client, prefix, "req") == 1  # it was sent: it counts as a request
    working = make_calls({"m": model_config(server.url("hang1"), **PRICES, limits=limits)})
    reply = await wrap_model_call("m", prompt="q", calls=working, fallback="fb")
    assert not reply.degraded, reply.reason


def _holding_process(redis_url: str, prefix: str, model: dict[str, Any]) -> subprocess.Popen[bytes]:
    spec = {
        "redis_url": redis_url,
        "prefix": prefix,
        "models": {"m": model},
        "model": "m",
        "prompt": "q",
        "calls": 1,
        "fallback": "fb",
        "ready_key": f"{prefix}:test:ready",
        "go_key": f"{prefix}:test:go",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "tests.modelcall.proc_calls", orjson.dumps(spec).decode()],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ),
    )


async def test_the_hold_of_a_killed_process_expires(
    server: HostileServer, make_calls: MakeCalls, client: Redis, redis_url: str, prefix: str
) -> None:
    limits = {"daily_budget_usd": 1.5 * CALL_USD}
    # The worker's one call hangs (no answer at all) while it holds 0.1 USD of 0.15.
    hanging = {
        "base_url": server.url("hang100"),
        **FAST,
        **PRICES,
        "limits": limits,
        "timeouts": {"total_s": 4},
    }
    proc = _holding_process(redis_url, prefix, hanging)
    holds = holds_key(_day_key(prefix))
    try:

        async def ready() -> bool:
            return await client.get(f"{prefix}:test:ready") is not None

        await eventually(ready, timeout=60, what="worker ready")
        await client.set(f"{prefix}:test:go", 1)

        async def sent() -> bool:
            return bool(server.log("hang")) and await client.zcard(holds) == 1

        await eventually(sent, timeout=30, what="the worker's call in flight")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    calls = make_calls({"m": model_config(server.url("perchar1"), **PRICES, limits=limits)})
    # The dead worker's hold still counts until it expires: no second call fits.
    refused = await wrap_model_call("m", prompt="q", calls=calls, fallback="fb")
    assert refused.reason == "budget_exhausted"
    entries = await client.zrange(holds, 0, -1, withscores=True)
    assert len(entries) == 1
    expires_ms = float(entries[0][1])

    async def expired() -> bool:
        seconds, micros = await client.time()
        return seconds * 1000 + micros // 1000 > expires_ms

    await eventually(expired, timeout=30, what="the dead worker's hold expiry")
    reply = await wrap_model_call("m", prompt="q", calls=calls, fallback="fb")
    assert not reply.degraded, reply.reason
    assert await _field(client, prefix, "held") == 0
    assert await _field(client, prefix, "spend") == CALL_USD * 1_000_000
    assert await client.zcard(holds) == 0


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_retry_after_billed_partial_output_stays_within_the_budget(
    server: HostileServer, make_calls: MakeCalls, client: Redis, prefix: str, provider: str
) -> None:
    # Each attempt streams 60 tokens (0.06 USD, billed) and stalls. The hold must cover them
    # and the retry's worst case (0.1 USD): 0.16 USD does not fit a budget of 0.15.
    model = model_config(
        server.url("stall60"),
        **{**PRICES, "stream": True, "provider": provider},
        limits={"daily_budget_usd": 0.15},
        timeouts={"total_s": 10, "first_token_s": 2, "per_token_s": 0.2},
    )
    calls = make_calls({"m": model})
    reply = await wrap_model_call("m", prompt="q", calls=calls, fallback="fb")
    assert (reply.degraded, reply.reason) == (True, "budget_exhausted")
    assert [a.outcome for a in reply.attempts] == ["transient", "refused"]
    assert len(server.log("stall")) == 1
    assert await _field(client, prefix, "spend") == 60 * 1000  # 60 tokens at 1 USD / 1,000
    assert await _field(client, prefix, "held") == 0
