"""``deepagents demo``: the whole system on one machine, with one command.

Starts an embedded Redis when no DEEPAGENTS_REDIS_URL is set, runs one worker process per
example agent, submits a mixed workload (urgent trades, normal trades, risk checks,
research) at a fixed offered rate, shows progress, and ends with a summary.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from deepagents.cli.common import embedded_redis_if_needed, load_runtime, redis_client, run
from deepagents.config import FileConfig
from deepagents.config.schema import AgentEntry, Strategy
from deepagents.contract.result import ResultStatus
from deepagents.errors import DeepAgentsError
from deepagents.orchestrator import Orchestrator
from deepagents.orchestrator.admin import Admin

AGENT_CLASSES = {
    "risk": "agents.risk:RiskAgent",
    "research": "agents.research:ResearchAgent",
}
SYMBOLS = ("IF", "IC", "RB", "CU", "AU", "ES", "NQ", "CL", "GC")


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="run the whole system locally on a mixed workload")
    p.add_argument("--tasks", type=int, default=3000, help="tasks to submit (default 3000)")
    p.add_argument("--rate", type=float, default=600.0, help="offered load, tasks/s (default 600)")
    p.add_argument("--duration", type=float, default=None, help="stop submitting after S seconds")
    p.add_argument("--workers", type=int, default=1, help="worker processes per agent type")
    p.add_argument("--seed", type=int, default=7)
    p.set_defaults(func=main)


def demo_config() -> FileConfig:
    """Used when no config file is found: the example agents and strategies."""
    return FileConfig(
        agents={
            name: AgentEntry.model_validate({"class": path}) for name, path in AGENT_CLASSES.items()
        },
        strategies=[
            Strategy(
                name="urgent-trades", match={"intent": "trade", "payload.urgent": True}, tier="p0"
            ),
            Strategy(name="trades", match={"intent": "trade"}, tier="p1"),
        ],
    )


def make_task(rng: random.Random) -> tuple[str, dict[str, Any]]:
    roll = rng.random()
    order = {
        "symbol": rng.choice(SYMBOLS),
        "side": rng.choice(("buy", "sell")),
        "quantity": rng.randint(1, 20),
        "price": round(rng.uniform(10, 5000), 2),
        "available_funds": round(rng.uniform(50_000, 5_000_000), 2),
    }
    if roll < 0.10:
        return "urgent trade", {"intent": "trade", "payload": {**order, "urgent": True}}
    if roll < 0.40:
        return "trade", {"intent": "trade", "payload": order}
    if roll < 0.70:
        if rng.random() < 0.02:  # a few orders for contracts the reference table lacks
            order["symbol"] = "ZZ"
        return "risk check", {"intent": "risk_check", "payload": order}
    text = " ".join(
        rng.choice(("margin", "futures", "volatility", "hedge", "basis", "rates", "curve"))
        for _ in range(rng.randint(20, 80))
    )
    return "research", {"intent": "research", "payload": {"topic": "desk notes", "text": text}}


@dataclass
class Tally:
    submitted: int = 0
    done: int = 0
    failed: int = 0
    refused: int = 0
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    kinds: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def start_workers(
    url: str, prefix: str, config_path: str | None, count: int
) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "DEEPAGENTS_REDIS_URL": url, "DEEPAGENTS_PREFIX": prefix}
    if config_path:
        env["DEEPAGENTS_CONFIG"] = config_path
    procs = []
    for path in AGENT_CLASSES.values():
        for _ in range(count):
            procs.append(
                subprocess.Popen(  # noqa: S603 - our own interpreter and module
                    [sys.executable, "-m", "deepagents", "worker", path],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            )
    return procs


def stop_workers(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


async def wait_for_workers(
    orch: Orchestrator, procs: list[subprocess.Popen[bytes]], timeout: float = 60
) -> None:
    """Until every agent type has registered an instance (or a worker died)."""
    from deepagents.store.registry import AgentRegistry

    registry = AgentRegistry(orch.client, orch.keys)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                err = (proc.stderr.read() if proc.stderr else b"").decode(errors="replace")[-2000:]
                raise DeepAgentsError(f"a worker exited at start (code {proc.returncode}):\n{err}")
        agents = await registry.agents()
        if all(agents.get(name, {}).get("instances") for name in AGENT_CLASSES):
            return
        await asyncio.sleep(0.1)
    raise DeepAgentsError(f"workers did not register within {timeout} s")


async def drive(
    orch: Orchestrator, args: argparse.Namespace, tally: Tally, console: Console
) -> float:
    rng = random.Random(args.seed)
    pending: set[asyncio.Task[None]] = set()
    started = time.monotonic()
    end_by = started + args.duration if args.duration else None

    async def one(kind: str, spec: dict[str, Any]) -> None:
        t0 = time.monotonic()
        try:
            handle = await orch.submit(spec)
        except DeepAgentsError as exc:
            tally.refused += 1
            tally.errors[exc.code] += 1
            return
        result = await handle.result(timeout=120)
        tally.latencies[handle.tier].append((time.monotonic() - t0) * 1000)
        tally.done += 1
        tally.kinds[kind] += 1
        if result.status is ResultStatus.FAILED:
            tally.failed += 1
            tally.errors[result.error.code if result.error else "failed"] += 1

    with Live(console=console, refresh_per_second=4, transient=True) as live:
        for i in range(args.tasks):
            if end_by and time.monotonic() > end_by:
                break
            due = started + i / args.rate
            if (delay := due - time.monotonic()) > 0:
                await asyncio.sleep(delay)
            kind, spec = make_task(rng)
            task = asyncio.create_task(one(kind, spec))
            pending.add(task)
            task.add_done_callback(pending.discard)
            tally.submitted += 1
            if i % 50 == 0:
                live.update(progress(tally, time.monotonic() - started))
        while pending:
            await asyncio.wait(pending, timeout=0.25)
            live.update(progress(tally, time.monotonic() - started))
    return time.monotonic() - started


def progress(tally: Tally, elapsed: float) -> Table:
    table = Table(title=f"deepagents demo — {elapsed:.1f} s")
    for col in ("submitted", "completed", "failed", "refused", "tasks/s"):
        table.add_column(col, justify="right")
    rate = tally.done / elapsed if elapsed > 0 else 0.0
    table.add_row(
        str(tally.submitted), str(tally.done), str(tally.failed), str(tally.refused), f"{rate:.0f}"
    )
    return table


def summary(tally: Tally, elapsed: float, dead: int) -> Table:
    table = Table(
        title=f"{tally.done} tasks in {elapsed:.1f} s = {tally.done / elapsed:.0f} tasks/s; "
        f"{tally.failed} failed, {dead} dead-lettered"
    )
    for col in ("tier", "tasks", "p50 ms", "p95 ms", "p99 ms"):
        table.add_column(col, justify="right")
    for tier in sorted(tally.latencies):
        values = tally.latencies[tier]
        table.add_row(
            tier, str(len(values)), *(f"{percentile(values, q):.1f}" for q in (0.5, 0.95, 0.99))
        )
    return table


def main(args: argparse.Namespace) -> int:
    runtime = load_runtime(args.config)
    config_path = runtime.settings.config_path()
    config = runtime.config if config_path else demo_config()
    prefix = f"demo-{uuid.uuid4().hex[:6]}"
    settings = runtime.settings.model_copy(update={"prefix": prefix})
    console = Console(stderr=False)
    with embedded_redis_if_needed(settings) as url:
        if settings.redis_url is None:
            console.print(f"[dim]started an embedded Redis at {url}[/dim]")
        procs = start_workers(
            url, prefix, str(config_path.resolve()) if config_path else None, args.workers
        )
        try:
            return run(_demo(url, config, settings, procs, args, console))
        finally:
            stop_workers(procs)


async def _demo(
    url: str,
    config: FileConfig,
    settings: Any,
    procs: list[subprocess.Popen[bytes]],
    args: argparse.Namespace,
    console: Console,
) -> int:
    async with redis_client(url) as client:
        try:
            async with Orchestrator(client, config=config, settings=settings) as orch:
                console.print(f"waiting for {len(procs)} worker process(es)…")
                await wait_for_workers(orch, procs)
                console.print(
                    f"submitting {args.tasks} tasks at {args.rate:.0f}/s (10% urgent trades → p0, "
                    "30% trades → p1, 30% risk checks and 30% research → p2)"
                )
                tally = Tally()
                elapsed = await drive(orch, args, tally, console)
                status = await Admin(client, config, settings.prefix).status()
                dead = sum(
                    row["dead_letters"] for row in status if row["tier"] == config.tier_names[0]
                )
                console.print(summary(tally, elapsed, dead))
                if tally.errors:
                    console.print(
                        "outcomes other than success: "
                        + ", ".join(f"{k}={v}" for k, v in sorted(tally.errors.items()))
                    )
        finally:
            keys = [k async for k in client.scan_iter(match=f"{settings.prefix}:*", count=1000)]
            for i in range(0, len(keys), 500):
                await client.delete(*keys[i : i + 500])
    return 0
