"""Token admission corrects itself: the input reserved is an upper bound (UTF-8 bytes), and
usage above a reservation is charged to the window (debt). Two worker processes, the tests'
own server reporting usage far above the old estimate (``ceil(chars / 4) + 4``), a real
Redis; the server's arrival log is the truth: tokens per window stay within the limit plus
one call."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from redis.asyncio import Redis

from deepagents.modelcall import wrap_model_call
from deepagents.store.models.admission import RateLimiter
from tests.modelcall.conftest import FAST, PROVIDERS, MakeCalls, model_config
from tests.modelcall.fleet import run_fleet
from tests.modelcall.hostile_server import HostileServer, max_window_tokens
from tests.support.wait import eventually

WINDOW_S, TPM, MAX_TOKENS = 2.0, 1200, 20


@pytest.fixture
def server() -> Iterator[HostileServer]:
    with HostileServer() as running:
        yield running


def _spec(
    redis_url: str,
    prefix: str,
    url: str,
    prompt: str,
    calls: int,
    provider: str = "openai",
    **limits: Any,
) -> dict[str, Any]:
    model = {
        "base_url": url,
        "provider": provider,
        **FAST,
        "stream": False,
        "max_tokens": MAX_TOKENS,
        # The last calls wait a few windows for their turn: allow them the time.
        "timeouts": {**FAST["timeouts"], "total_s": 90},
        "limits": {"tpm": TPM, "window_s": WINDOW_S, **limits},
    }
    return {
        "redis_url": redis_url,
        "prefix": prefix,
        "models": {"m": model},
        "model": "m",
        "prompt": prompt,
        "calls": calls,
    }


async def test_under_estimated_prompts_stay_within_the_limit(
    server: HostileServer, client: Redis, redis_url: str, prefix: str
) -> None:
    # 100 CJK characters: one token each for the server, 25 + 4 by the chars/4 estimate.
    prompt = "漢" * 100
    per_call = 100 + MAX_TOKENS
    spec = _spec(redis_url, prefix, server.url("perchar1"), prompt, calls=15)
    summaries = await run_fleet(client, spec, processes=2)
    results = [r for s in summaries for r in s["results"]]
    assert len(results) == 30 and all(r["ok"] for r in results), results
    arrivals = server.log("perchar")
    assert {a.tokens for a in arrivals} == {per_call}
    assert max_window_tokens(arrivals, WINDOW_S) <= TPM + per_call


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_usage_above_the_reservation_is_charged_as_debt(
    server: HostileServer, client: Redis, redis_url: str, prefix: str, provider: str
) -> None:
    # The server reports 3 tokens per character: more than any tokenizer (above the bound),
    # so only the debt can keep the window right. One call in flight at a time, fleet-wide.
    prompt = "a" * 100
    per_call = 300 + MAX_TOKENS
    spec = _spec(
        redis_url,
        prefix,
        server.url("perchar3"),
        prompt,
        calls=6,
        provider=provider,
        fleet_concurrency=1,
    )
    summaries = await run_fleet(client, spec, processes=2)
    results = [r for s in summaries for r in s["results"]]
    assert len(results) == 12 and all(r["ok"] for r in results), results
    arrivals = server.log("perchar")
    assert {a.tokens for a in arrivals} == {per_call}
    assert max_window_tokens(arrivals, WINDOW_S) <= TPM + per_call


async def test_debt_outlives_the_reservations_bucket(client: Redis, prefix: str) -> None:
    limiter = RateLimiter(client, f"{prefix}:rl", rpm=None, tpm=1000, window_s=1.0)
    admitted = await limiter.try_admit(100)
    assert admitted.reservation is not None

    async def gone() -> bool:
        return not await client.exists(f"{prefix}:rl")

    await eventually(gone, timeout=10, what="the reservation's bucket expired")
    # The call used 900 tokens and answered after its bucket went: the 800 above the
    # reservation are charged now, so 300 more do not fit in the window of 1,000.
    await limiter.correct(admitted.reservation, 900)
    refused = await limiter.try_admit(300)
    assert refused.reservation is None and refused.wait_s > 0
    assert (await limiter.try_admit(200)).reservation is not None


async def test_a_bound_over_the_window_still_admits_a_call_that_fits(
    server: HostileServer, make_calls: MakeCalls
) -> None:
    # 600 ASCII characters: bounded at 608 input tokens, likely 154; the window is 500.
    calls = make_calls(
        {
            "m": model_config(
                server.url("perchar1"), stream=False, max_tokens=20, limits={"tpm": 500}
            )
        }
    )
    reply = await wrap_model_call("m", prompt="b" * 600, calls=calls, fallback="fb")
    assert not reply.degraded, reply.reason
