"""The remote-agent adapter's overhead per call, over a bare httpx POST on loopback.

    .venv/bin/python loadtests/bench_remote.py --calls 2000

Against the Node reference agent (``agents/remote/node/risk-agent.js``) on 127.0.0.1, one
call at a time on one keep-alive connection, interleaved in rounds so drift in the machine's
load hits both alike:

- bare: ``httpx.AsyncClient.post`` of a ready-made execute request body;
- adapter: ``RemoteAgent.execute`` of the same task (envelope, headers, timeout from the
  deadline, size-capped read, content-type check, response validation, Result).

Prints p50 and p90 of each and the p50 difference (the issue's target: at most 0.5 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import httpx
import orjson

from deepagents.config import FileConfig
from deepagents.contract import Task
from deepagents.contract.task import utcnow
from deepagents.remote import remote_agent_class

ROOT = Path(__file__).resolve().parents[1]
ORDER = {"symbol": "IF", "side": "buy", "quantity": 2, "price": "4000.5",
         "available_funds": "1000000.00"}  # fmt: skip


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


async def bench(url: str, calls: int) -> dict[str, float]:
    entry = FileConfig.model_validate(
        {"agents": {"bench": {"intents": ["risk_check"], "remote": {"url": url}}}}
    ).agents["bench"]
    agent = remote_agent_class("bench", entry)()
    task = Task(intent="risk_check", payload=ORDER, deadline=utcnow() + timedelta(hours=1))
    await agent.can_handle(task)  # sets the delivery's envelope, as the worker's run does
    context = await agent.prepare_context(task)
    body = orjson.dumps({"protocol": 1, "task": {"id": task.task_id, "intent": task.intent,
        "payload": ORDER, "tenant": None}, "attempt": 1, "time_left_ms": 3600000,
        "traceparent": None, "idempotency_key": f"{task.task_id}:1",
        "context": context["remote"]})  # fmt: skip
    bare, adapter = [], []
    async with httpx.AsyncClient(headers={"content-type": "application/json"}) as client:
        for _ in range(200):  # warm both paths
            await client.post(f"{url}/v1/execute", content=body)
            await agent.execute(context)
        for _ in range(calls):
            t0 = time.perf_counter()
            response = await client.post(f"{url}/v1/execute", content=body)
            response.json()
            t1 = time.perf_counter()
            await agent.execute(context)
            t2 = time.perf_counter()
            bare.append((t1 - t0) * 1000)
            adapter.append((t2 - t1) * 1000)
    await agent.aclose()
    return {
        "bare_p50_ms": statistics.median(bare),
        "bare_p90_ms": pct(bare, 90),
        "adapter_p50_ms": statistics.median(adapter),
        "adapter_p90_ms": pct(adapter, 90),
        "overhead_p50_ms": statistics.median(adapter) - statistics.median(bare),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    node = shutil.which("node")
    if node is None:
        raise SystemExit("bench_remote: node is not installed")
    script = ROOT / "agents" / "remote" / "node" / "risk-agent.js"
    proc = subprocess.Popen([node, str(script), "--port", "0"], stdout=subprocess.PIPE,
                            env=dict(os.environ))  # fmt: skip
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline().split()[1])
        figures = asyncio.run(bench(f"http://127.0.0.1:{port}", args.calls))
    finally:
        proc.kill()
        proc.wait(10)
    print(
        orjson.dumps({"calls": args.calls, **{k: round(v, 3) for k, v in figures.items()}}).decode()
    )


if __name__ == "__main__":
    main()
