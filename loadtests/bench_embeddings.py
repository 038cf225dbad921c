"""Benchmark: ``embed`` batched against unbatched, on the model simulator.

    .venv/bin/python -m loadtests.bench_embeddings [--calls 2000] [--concurrency 64]
        [--latency-ms 20] [--batch-size 64] [--max-wait-ms 5]

Starts an embedded Redis and the simulator in its own process (``--latency-ms`` before
each answer, as a provider's round trip), then runs the same ``--calls`` one-input
``embed`` calls, ``--concurrency`` at a time, twice per round for three rounds,
alternating: unbatched (``batch_size: 1``) and batched. Prints calls/s, the p50 and p99
latency of a call, and the HTTP requests the simulator saw (``/sim/stats``).
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

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.modelcall import ModelCalls, ModelConfig, embed
from deepagents.transport.redis_streams import connect


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _requests(url: str) -> int:
    async with httpx.AsyncClient() as http:
        stats = (await http.get(url.removesuffix("/v1") + "/sim/stats")).json()
    return int(stats["requests"])


async def _one_run(
    args: argparse.Namespace, url: str, redis_url: str, batch_size: int, max_wait_ms: float
) -> dict[str, float]:
    model = ModelConfig.model_validate(
        {
            "base_url": url,
            "kind": "embedding",
            "price_in_per_1k": 0.00002,
            "timeouts": {"total_s": 60},
            "limits": {"concurrency": args.concurrency},
            "batching": {"batch_size": batch_size, "max_wait_ms": max_wait_ms},
        }
    )
    redis = connect(redis_url)
    prefix = "benchemb" + uuid.uuid4().hex[:6]
    latencies: list[float] = []
    sem = asyncio.Semaphore(args.concurrency)
    try:
        async with ModelCalls({"e": model}, redis, prefix=prefix) as calls:

            async def one(i: int) -> None:
                async with sem:
                    t0 = time.perf_counter()
                    await embed("e", [f"input number {i} of the benchmark"], calls=calls)
                    latencies.append((time.perf_counter() - t0) * 1000)

            await asyncio.gather(*(one(i) for i in range(50)))  # warm: pool, scripts
            latencies.clear()
            before = await _requests(url)
            t0 = time.perf_counter()
            await asyncio.gather(*(one(i) for i in range(args.calls)))
            elapsed = time.perf_counter() - t0
            requests = await _requests(url) - before
        keys = [k async for k in redis.scan_iter(match=f"{prefix}:*")]
        if keys:
            await redis.delete(*keys)
    finally:
        await redis.aclose()
    return {
        "calls_per_s": args.calls / elapsed,
        "p50_ms": statistics.median(latencies),
        "p99_ms": _pct(latencies, 0.99),
        "http_requests": float(requests),
    }


async def _run(args: argparse.Namespace, url: str, redis_url: str) -> dict[str, list[Any]]:
    runs: dict[str, list[Any]] = {"unbatched": [], "batched": []}
    for _ in range(3):  # alternating, so drift on the shared machine hits both
        runs["unbatched"].append(await _one_run(args, url, redis_url, 1, 0))
        runs["batched"].append(
            await _one_run(args, url, redis_url, args.batch_size, args.max_wait_ms)
        )
    return runs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    args = parser.parse_args()
    sim = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "deepagents",
            "sim-model",
            "--port",
            "0",
            "--latency-ms",
            str(args.latency_ms),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert sim.stdout is not None
        match = re.search(r"(http://127\.0\.0\.1:\d+/v1)", sim.stdout.readline())
        assert match, "simulator did not start"
        with EmbeddedRedis() as redis:
            runs = asyncio.run(_run(args, match.group(1), redis.url))
    finally:
        sim.terminate()
        sim.wait(timeout=10)
    print(
        f"calls={args.calls} concurrency={args.concurrency} latency_ms={args.latency_ms} "
        f"batch_size={args.batch_size} max_wait_ms={args.max_wait_ms}"
    )
    for name, results in runs.items():
        median = {key: statistics.median(r[key] for r in results) for key in results[0]}
        each = ", ".join(f"{r['calls_per_s']:.0f}" for r in results)
        print(
            f"  {name}: calls/s {median['calls_per_s']:.0f} (runs: {each}), "
            f"p50 {median['p50_ms']:.1f} ms, p99 {median['p99_ms']:.1f} ms, "
            f"HTTP requests {median['http_requests']:.0f}"
        )


if __name__ == "__main__":
    main()
