"""``wrap_tool_call``'s overhead per call over a bare SDK ``call_tool``, against a local MCP
server over streamable HTTP (the SDK server of ``tests/tools/mcp_server.py``, its ``add``
tool, in a subprocess on 127.0.0.1).

    .venv/bin/python loadtests/bench_tools.py --calls 2000 --runs 5 \
        [--redis-url redis://127.0.0.1:6379/0]

One call at a time, interleaved in pairs so drift in the machine's load hits both alike:

- bare: ``mcp.Client.call_tool("add", ...)`` on one connected client;
- wrapped: ``wrap_tool_call`` of the listed ``add`` tool on the pooled session (arguments
  checked against the schema, bounded JSON both ways, the per-tool cap, metrics, the
  ``tool_call`` audit event into a ledger, and with ``--redis-url`` the fleet's breaker).

Prints per run the p50 of each and the p50 of the per-pair difference (the issue's target:
at most 1 ms), then the medians over the runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from mcp import Client
from redis.asyncio import Redis

from deepagents.config.schema import McpServerConfig
from deepagents.contract.toolcalls import ToolCall
from deepagents.telemetry.metrics import Metrics
from deepagents.tools import ToolCalls, start_tool_ledger, wrap_tool_call
from deepagents.tools.mcp import McpServers

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.tools.mcp_server", "http", str(port)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(600):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("the MCP server did not start")


async def _run(url: str, calls: int, redis: Redis | None, prefix: str) -> dict[str, float]:
    servers = McpServers({"bench": McpServerConfig(url=url)})
    runtime = ToolCalls(redis, prefix=prefix, metrics=Metrics().tool, mcp=servers)
    add = next(t for t in await servers.tools("bench") if t.name == "add")
    bare_ms: list[float] = []
    wrapped_ms: list[float] = []
    async with Client(url) as bare:
        for i in range(calls + 50):  # the first 50 pairs warm up, untimed
            start_tool_ledger()  # a delivery's ledger, as in the worker
            args = {"a": i, "b": 1}
            t0 = time.perf_counter()
            await bare.call_tool("add", args)
            t1 = time.perf_counter()
            result = await wrap_tool_call(add, ToolCall("c", "add", args), calls=runtime)
            t2 = time.perf_counter()
            assert not result.is_error, result
            if i >= 50:
                bare_ms.append((t1 - t0) * 1000)
                wrapped_ms.append((t2 - t1) * 1000)
    await runtime.aclose()
    diffs = [w - b for w, b in zip(wrapped_ms, bare_ms, strict=True)]
    return {
        "bare_p50_ms": round(statistics.median(bare_ms), 3),
        "wrapped_p50_ms": round(statistics.median(wrapped_ms), 3),
        "overhead_p50_ms": round(statistics.median(diffs), 3),
    }


async def main(args: argparse.Namespace, port: int, proc: subprocess.Popen[bytes]) -> None:
    redis = Redis.from_url(args.redis_url) if args.redis_url else None
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    rows: list[dict[str, float]] = []
    try:
        for _ in range(args.runs):
            row = await _run(f"http://127.0.0.1:{port}/mcp", args.calls, redis, prefix)
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        proc.kill()
        proc.wait()
        if redis is not None:
            keys = [k async for k in redis.scan_iter(match=f"{prefix}:*")]
            if keys:
                await redis.delete(*keys)
            await redis.aclose()
    medians = {key: round(statistics.median(r[key] for r in rows), 3) for key in rows[0]}
    print(json.dumps({"medians": medians, "runs": args.runs, "calls": args.calls}))


def cli() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--redis-url", default=None, help="with the fleet's breaker in Redis")
    args = parser.parse_args()
    port = _free_port()
    asyncio.run(main(args, port, _server(port)))


if __name__ == "__main__":
    cli()
