"""Benchmark: what ``wrap_model_call`` adds over a bare httpx call to the simulator.

    .venv/bin/python -m tests.modelcall.bench_overhead [--calls 2000] [--stream]

Starts a real Redis (embedded) and the model simulator in a separate process (zero
latency), then times, interleaved, N bare ``httpx`` POSTs and N ``wrap_model_call`` calls
(breaker allow + record in Redis, credentials cached, no budget or rate limits unless
``--limits``). Prints p50/p99 of each, the added latency, and calls/s at concurrency 1
and 32.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

import httpx
import orjson

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.modelcall import ModelCalls, ModelConfig, wrap_model_call
from deepagents.transport.redis_streams import connect

PROMPT = [{"role": "user", "content": "Summarise the desk notes in one line."}]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _bare(http: httpx.AsyncClient, url: str, stream: bool) -> None:
    body = {"model": "sim", "messages": PROMPT, "max_tokens": 64, "stream": stream}
    if not stream:
        response = await http.post(
            url + "/chat/completions",
            content=orjson.dumps(body),
            headers={"content-type": "application/json"},
        )
        orjson.loads(response.content)
        return
    async with http.stream(
        "POST",
        url + "/chat/completions",
        content=orjson.dumps(body),
        headers={"content-type": "application/json"},
    ) as response:
        async for _ in response.aiter_lines():
            pass


async def _rate(
    name: str,
    concurrency: int,
    n: int,
    http: httpx.AsyncClient,
    url: str,
    calls: ModelCalls,
    stream: bool,
) -> float:
    sem = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with sem:
            if name == "bare":
                await _bare(http, url, stream)
            else:
                await wrap_model_call("m", PROMPT, calls=calls)

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return n / (time.perf_counter() - t0)


async def _run(args: argparse.Namespace, url: str, redis_url: str) -> dict[str, Any]:
    redis = connect(redis_url)
    limits = {"rpm": 10**9, "tpm": 10**12, "daily_budget_usd": 10**6} if args.limits else {}
    model = ModelConfig.model_validate(
        {
            "base_url": url,
            "max_tokens": 64,
            "stream": args.stream,
            "price_in_per_1k": 0.001,
            "limits": limits,
        }
    )
    prefix = "bench" + uuid.uuid4().hex[:6]
    try:
        limits_http = httpx.Limits(max_connections=32, max_keepalive_connections=32)
        async with (
            ModelCalls({"m": model}, redis, prefix=prefix) as calls,
            httpx.AsyncClient(limits=limits_http) as http,
        ):
            for _ in range(50):  # warm both paths: connections, scripts loaded
                await _bare(http, url, args.stream)
                await wrap_model_call("m", PROMPT, calls=calls)
            # Alternating blocks, so work left in the background by one path is charged to
            # that path (a sustained load), not to the other one.
            bare: list[float] = []
            wrapped: list[float] = []
            block = 100
            for _ in range(max(1, args.calls // block)):
                for _ in range(block):
                    t0 = time.perf_counter()
                    await _bare(http, url, args.stream)
                    bare.append((time.perf_counter() - t0) * 1000)
                for _ in range(block):
                    t0 = time.perf_counter()
                    await wrap_model_call("m", PROMPT, calls=calls)
                    wrapped.append((time.perf_counter() - t0) * 1000)
            rates: dict[str, float] = {}
            for concurrency in (1, 32):
                for name in ("bare", "wrapped"):
                    rates[f"{name}_calls_per_s_c{concurrency}"] = await _rate(
                        name, concurrency, args.calls, http, url, calls, args.stream
                    )
        keys = [k async for k in redis.scan_iter(match=f"{prefix}:*")]
        if keys:
            await redis.delete(*keys)
    finally:
        await redis.aclose()
    return {
        "bare_p50_ms": statistics.median(bare),
        "bare_p99_ms": _pct(bare, 0.99),
        "wrapped_p50_ms": statistics.median(wrapped),
        "wrapped_p99_ms": _pct(wrapped, 0.99),
        "added_p50_ms": statistics.median(wrapped) - statistics.median(bare),
        "added_p99_ms": _pct(wrapped, 0.99) - _pct(bare, 0.99),
        **rates,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--limits", action="store_true", help="also budget + rate admission")
    args = parser.parse_args()
    sim = subprocess.Popen(
        [sys.executable, "-m", "deepagents", "sim-model", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert sim.stdout is not None
        match = re.search(r"(http://127\.0\.0\.1:\d+/v1)", sim.stdout.readline())
        assert match, "simulator did not start"
        with EmbeddedRedis() as redis:
            result = asyncio.run(_run(args, match.group(1), redis.url))
    finally:
        sim.terminate()
        sim.wait(timeout=10)
    mode = ("stream" if args.stream else "plain") + (" +limits" if args.limits else "")
    print(f"mode={mode} calls={args.calls}")
    for key, value in result.items():
        print(f"  {key}: {value:.3f}" if "ms" in key else f"  {key}: {value:.0f}")


if __name__ == "__main__":
    main()
