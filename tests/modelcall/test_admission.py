"""Fleet-wide admission: tokens/requests per window across processes, in-flight limits."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from redis.asyncio import Redis

from deepagents.modelcall import wrap_model_call
from deepagents.modelcall.simulator import SimulatorThread, count_tokens
from deepagents.store.models.admission import RateLimiter
from tests.modelcall.conftest import FAST, MakeCalls, model_config
from tests.modelcall.fleet import run_fleet
from tests.support.replies import as_bytes
from tests.support.wait import eventually

T = TypeVar("T")


def _max_window_tokens(arrivals: list[tuple[float, int]], window_s: float) -> int:
    """The largest token total the server saw inside any window of ``window_s``."""
    worst = 0
    for i, (start, _) in enumerate(arrivals):
        total = sum(t for at, t in arrivals[i:] if at < start + window_s)
        worst = max(worst, total)
    return worst


async def test_two_processes_share_a_tokens_per_window_limit(
    sim: SimulatorThread, client: Redis, redis_url: str, prefix: str
) -> None:
    # The provider (simulator) allows 10,000 tokens per window and answers 429 above it.
    # The window is scaled from a minute to 2 s so the test runs in seconds.
    window_s, tpm = 2.0, 10_000
    sim.call(lambda: sim.sim.configure(tpm=tpm, window_s=window_s, completion_tokens=300))
    prompt = "word " * 560  # 2,800 characters: about 700 tokens in, 300 out
    # The last calls wait about five windows for their turn: allow them the time.
    model = {
        "base_url": sim.url,
        **FAST,
        "max_tokens": 300,
        "timeouts": {**FAST["timeouts"], "total_s": 90},
        "limits": {"tpm": tpm, "window_s": window_s},
    }
    spec = {
        "redis_url": redis_url,
        "prefix": prefix,
        "models": {"m": model},
        "model": "m",
        "prompt": prompt,
        "calls": 25,
    }
    summaries = await run_fleet(client, spec, processes=2)
    results = [r for s in summaries for r in s["results"]]
    assert len(results) == 50
    log = sim.log()
    assert all(r["ok"] for r in results), results
    t0 = log[0].arrived
    # No 429 was provoked: the fleet stayed under the provider's limit.
    assert {e.status for e in log} == {200}, " ".join(
        f"{e.arrived - t0:.3f}:{e.status}" for e in log
    )
    per_call = count_tokens([{"role": "user", "content": prompt}]) + 300
    assert 900 <= per_call <= 1100
    arrivals = sorted((e.arrived, e.prompt_tokens + e.completion_tokens) for e in log)
    assert _max_window_tokens(arrivals, window_s) <= tpm


async def test_reservation_is_corrected_to_the_reported_usage(
    sim: SimulatorThread, make_calls: MakeCalls, client: Redis
) -> None:
    # max_tokens 500 is reserved, the answer uses 12: the window keeps only what was used.
    calls = make_calls(
        {"m": model_config(sim.url, max_tokens=500, limits={"tpm": 100_000, "rpm": 100})}
    )
    reply = await wrap_model_call("m", prompt="hello", calls=calls)
    key = calls.runtime("m").keys.rate

    async def window() -> tuple[int, int]:
        buckets = await client.hgetall(key)
        tokens = sum(int(v) for k, v in buckets.items() if as_bytes(k).startswith(b"t:"))
        requests = sum(int(v) for k, v in buckets.items() if as_bytes(k).startswith(b"r:"))
        return tokens, requests

    # The correction runs after the answer is returned: wait for it.
    await eventually(
        lambda: _equals(window(), (reply.tokens_used, 1)), timeout=10, what="reservation corrected"
    )


async def _equals(value: Awaitable[T], expected: T) -> bool:
    return await value == expected


async def test_requests_per_window_wait_then_admit(client: Redis, prefix: str) -> None:
    limiter = RateLimiter(client, f"{prefix}:rl", rpm=2, tpm=None, window_s=1.0)
    assert (await limiter.try_admit(10)).reservation is not None
    assert (await limiter.try_admit(10)).reservation is not None
    refused = await limiter.try_admit(10)
    assert refused.reservation is None and 0 < refused.wait_s <= 1.5
    never = RateLimiter(client, f"{prefix}:rl2", rpm=None, tpm=100, window_s=1.0)
    assert (await never.try_admit(101)).wait_s < 0  # can never fit: refused at once


async def test_fleet_concurrency_limit(sim: SimulatorThread, make_calls: MakeCalls) -> None:
    sim.call(lambda: sim.sim.configure(latency_s=0.2))
    models = {"m": model_config(sim.url, limits={"fleet_concurrency": 3})}
    worker_a, worker_b = make_calls(models), make_calls(models)
    replies = await asyncio.gather(
        *(wrap_model_call("m", prompt="q", calls=w) for w in [worker_a, worker_b] * 6)
    )
    assert all(not r.degraded for r in replies)
    stats = sim.call(sim.sim.stats)
    assert stats["requests"] == 12 and stats["max_inflight"] <= 3


async def test_process_concurrency_limit(sim: SimulatorThread, make_calls: MakeCalls) -> None:
    sim.call(lambda: sim.sim.configure(latency_s=0.2))
    calls = make_calls({"m": model_config(sim.url, limits={"concurrency": 2})})
    await asyncio.gather(*(wrap_model_call("m", prompt="q", calls=calls) for _ in range(8)))
    stats = sim.call(sim.sim.stats)
    assert stats["requests"] == 8 and stats["max_inflight"] == 2
