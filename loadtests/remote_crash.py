"""10,000 tasks over two worker processes to the Node reference agent, one worker killed
with ``kill -9`` mid-run: every task is committed once, with the right answer.

    .venv/bin/python loadtests/remote_crash.py --tasks 10000 --redis-url redis://127.0.0.1:6379/0

``tests/remote/test_crash.py`` runs the same at 2,000 tasks (and checks that a resent attempt
keeps its idempotency key, from the agent's call log); at 10,000 it takes minutes on a loaded
machine, so it runs here. The ledger is the outbox: one terminal audit event per task, read
from both shards' outbox streams; "started" events count the runs (a task the killed worker
had under way starts twice). Prints one JSON line; exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson

from agents.risk import Order, margin_for
from deepagents.config import Settings, parse_config
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from deepagents.transport.redis_streams import connect

ROOT = Path(__file__).resolve().parents[1]
CONFIG = """
tiers: {{p0: {{concurrency: 20, max_wait_ms: 600000}}}}
default_tier: p0
defaults: {{shards: 2, max_deliveries: 5, visibility_timeout_ms: 1000, block_ms: 200,
            max_backlog: 1000000, retry: {{base_ms: 50, max_ms: 200}}}}
agents:
  risk-node: {{intents: [risk_check], remote: {{url: "{url}", max_connections: 16}}}}
"""
TERMINAL = {"succeeded", "failed", "dead_lettered", "expired", "dropped"}


def order(i: int) -> dict[str, object]:
    return {"symbol": "IF", "side": "buy", "quantity": 1 + i % 40, "price": f"{3000 + i}.5",
            "available_funds": "5000000.00"}  # fmt: skip


def start_node() -> tuple[subprocess.Popen[bytes], str]:
    node = shutil.which("node")
    if node is None:
        raise SystemExit("remote_crash: node is not installed")
    script = ROOT / "agents" / "remote" / "node" / "risk-agent.js"
    proc = subprocess.Popen([node, str(script), "--port", "0"], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    return proc, f"http://127.0.0.1:{int(proc.stdout.readline().split()[1])}"


def start_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "deepagents", "worker", "--remote", "risk-node"],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


async def ledger(client: Any, prefix: str) -> tuple[Counter[str], Counter[str]]:
    """Terminal events and started events per task id, from both shards' outboxes."""
    terminal: Counter[str] = Counter()
    started: Counter[str] = Counter()
    for shard in range(2):
        for _, fields in await client.xrange(f"{prefix}:{{risk-node:{shard}}}:audit"):
            for event in orjson.loads(fields[b"events"]):
                if event["type"] in TERMINAL:
                    terminal[event["task_id"]] += 1
                elif event["type"] == "started":
                    started[event["task_id"]] += 1
    return terminal, started


async def run(url: str, n: int, kill_at: float) -> dict[str, Any]:
    node, service = start_node()
    prefix = f"remotecrash-{os.getpid()}"
    text = CONFIG.format(url=service)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(text)
    env = {**os.environ, "DEEPAGENTS_REDIS_URL": url, "DEEPAGENTS_PREFIX": prefix,
           "DEEPAGENTS_CONFIG": f.name, "DEEPAGENTS_OUTBOX": "true"}  # fmt: skip
    client = connect(url)
    workers = [start_worker(env), start_worker(env)]
    payloads = [order(i) for i in range(n)]
    try:
        while await client.hlen(f"{prefix}:agent:risk-node:instances") < 2:
            await asyncio.sleep(0.05)
        settings = Settings(prefix=prefix, outbox=True)
        async with Orchestrator.from_client(
            client, config=parse_config(text), settings=settings
        ) as orch:
            start = time.perf_counter()
            handles = []
            for i in range(0, n, 500):
                batch = [Task(intent="risk_check", payload=p) for p in payloads[i : i + 500]]
                handles += await orch.submit_many(batch)
            waits = [asyncio.ensure_future(h.result(timeout=3600)) for h in handles]
            while sum(w.done() for w in waits) < kill_at * n:
                await asyncio.sleep(0.05)
            workers[0].send_signal(signal.SIGKILL)
            workers[0].wait(10)
            killed_after = sum(w.done() for w in waits)
            results = await asyncio.gather(*waits)
            seconds = time.perf_counter() - start
        terminal, started = await ledger(client, prefix)
        dead = sum([await client.xlen(f"{prefix}:{{risk-node:{s}}}:dlq") for s in (0, 1)])
    finally:
        for proc in (*workers, node):
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
        for i in range(0, len(keys), 500):
            await client.delete(*keys[i : i + 500])
        await client.aclose()
        os.unlink(f.name)
    wrong = sum(
        r.status is not ResultStatus.SUCCESS
        or r.output["margin"] != str(margin_for(Order.model_validate(p)).quantize(Decimal("0.01")))
        for p, r in zip(payloads, results, strict=True)
    )
    ids = [h.task_id for h in handles]
    return {
        "tasks": n,
        "seconds": round(seconds, 1),
        "killed_after_results": killed_after,
        "wrong_or_failed": wrong,
        "committed_once": sum(terminal[t] == 1 for t in ids),
        "committed_twice_or_more": sum(terminal[t] > 1 for t in ids),
        "never_committed": sum(terminal[t] == 0 for t in ids),
        "ran_again_after_the_kill": sum(started[t] > 1 for t in ids),
        "dead_letters": dead,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--kill-at", type=float, default=0.2, help="share of results before")
    parser.add_argument(
        "--redis-url", default=os.environ.get("DEEPAGENTS_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    args = parser.parse_args()
    out = asyncio.run(run(args.redis_url, args.tasks, args.kill_at))
    print(orjson.dumps(out).decode())
    ok = (
        out["committed_once"] == args.tasks
        and not out["wrong_or_failed"]
        and not out["dead_letters"]
    )
    raise SystemExit(0 if ok and out["ran_again_after_the_kill"] else 1)


if __name__ == "__main__":
    main()
