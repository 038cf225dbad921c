"""``deepagents demo``: the whole system on one machine, with one command.

Starts an embedded Redis when no DEEPAGENTS_REDIS_URL is set, runs one worker process per
example agent, submits a mixed workload (urgent trades, normal trades, risk checks,
research) at a fixed offered rate, shows progress, and ends with a summary. Beside it run a
few long-running research pipelines, each of which stops to ask for an approval; the demo's
automatic approver answers them (``demo_pipeline.py``), so the demo runs unattended; and,
with the extra ``deepagents[langgraph]``, a few LangGraph research graphs whose approval
(an ``interrupt()``) the same approver answers (``demo_graph.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.live import Live
from rich.table import Table

from deepagents._internal.extras import require_extra
from deepagents._internal.redis_server import free_port
from deepagents.cli import demo_graph
from deepagents.cli.common import console as cli_console
from deepagents.cli.common import embedded_redis_if_needed, redis_client, require_reachable, run
from deepagents.cli.demo_pipeline import AGENT_CLASS as PIPELINE_CLASS
from deepagents.cli.demo_pipeline import PipelineRuns, approving, pipeline_line, run_pipelines
from deepagents.config import FileConfig, Settings, load_config, load_settings
from deepagents.config.schema import AgentEntry, Strategy
from deepagents.contract.result import ResultStatus
from deepagents.errors import ConfigError, DeepAgentsError
from deepagents.orchestrator import Orchestrator
from deepagents.orchestrator.admin import Admin
from deepagents.store.housekeeping import drop_prefix

AGENT_CLASSES = {
    "risk": "agents.risk:RiskAgent",
    "research": "agents.research:ResearchAgent",
    "research_pipeline": PIPELINE_CLASS,
}
if demo_graph.available():  # the extra deepagents[langgraph]: the research graph too
    AGENT_CLASSES[demo_graph.AGENT] = demo_graph.AGENT_CLASS


def running(graphs: int) -> dict[str, str]:
    """The agents the demo starts a worker for: no graph worker when it runs no graph."""
    return {n: p for n, p in AGENT_CLASSES.items() if graphs or n != demo_graph.AGENT}


UNKNOWN_SYMBOL = "ZZ"  # not in agents/data/futures.csv: the risk agent rejects it
SYMBOLS = ("IF", "IC", "RB", "CU", "AU", "ES", "NQ", "CL", "GC")


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="run the whole system locally on a mixed workload")
    p.add_argument("--tasks", type=int, default=3000, help="tasks to submit (default 3000)")
    p.add_argument("--rate", type=float, default=600.0, help="offered load, tasks/s (default 600)")
    p.add_argument("--duration", type=float, default=None, help="stop submitting after S seconds")
    p.add_argument("--workers", type=int, default=1, help="worker processes per agent type")
    p.add_argument("--seed", type=int, default=7, help="seed of the workload's random choices")
    p.add_argument(
        "--pipelines",
        type=int,
        default=3,
        help="long-running research pipelines, approved automatically (default 3)",
    )
    p.add_argument(
        "--graphs",
        type=int,
        default=2,
        help="LangGraph research graphs, approved automatically (default 2; needs the "
        "extra deepagents[langgraph])",
    )
    p.add_argument(
        "--no-audit",
        action="store_true",
        help="no audit log (default: PostgreSQL at DEEPAGENTS_DATABASE_URL, else embedded)",
    )
    p.add_argument(
        "--no-model-simulator",
        action="store_true",
        help="research runs offline (degraded) instead of against the model SIMULATOR",
    )
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


def write_config(config: FileConfig, path: Path) -> Path:
    data = config.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


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
            order["symbol"] = UNKNOWN_SYMBOL
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
    sample_task: str | None = None


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def start_workers(
    url: str,
    prefix: str,
    config_path: str,
    count: int,
    extra_env: dict[str, str],
    log_dir: Path,
    classes: dict[str, str] = AGENT_CLASSES,
) -> list[subprocess.Popen[bytes]]:
    """Worker processes; each logs to its own file (a pipe nobody reads would fill and stall
    the worker)."""
    env = {
        **os.environ,
        **extra_env,
        "DEEPAGENTS_REDIS_URL": url,
        "DEEPAGENTS_PREFIX": prefix,
        "DEEPAGENTS_CONFIG": config_path,
    }
    procs = []
    for name, path in classes.items():
        for i in range(count):
            with (log_dir / f"worker-{name}-{i}.log").open("wb") as log:
                procs.append(
                    subprocess.Popen(  # noqa: S603 - our own interpreter and module
                        [sys.executable, "-m", "deepagents", "worker", path],
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
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


def _tail_logs(log_dir: Path) -> str:
    return "\n".join(p.read_text(errors="replace")[-1500:] for p in sorted(log_dir.glob("*.log")))


async def wait_for_workers(
    orch: Orchestrator,
    procs: list[subprocess.Popen[bytes]],
    log_dir: Path,
    timeout: float = 60,
    names: Collection[str] = AGENT_CLASSES,
) -> None:
    """Until every agent type has registered an instance (or a worker died)."""

    registry = orch.registry
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                logs = _tail_logs(log_dir)
                raise DeepAgentsError(f"a worker exited at start (code {proc.returncode}):\n{logs}")
        agents = await registry.agents()
        if all(agents.get(name, {}).get("instances") for name in names):
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
        if kind == "research" and tally.sample_task is None:  # its trail shows a model call
            tally.sample_task = handle.task_id
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


def summary(tally: Tally) -> Table:
    """Latency per tier. Its title stays short: rich wraps a title to the table's width."""
    table = Table(title="latency per tier (submit to result)")
    for col in ("tier", "tasks", "p50 ms", "p95 ms", "p99 ms"):
        table.add_column(col, justify="right")
    for tier in sorted(tally.latencies):
        values = tally.latencies[tier]
        table.add_row(
            tier, str(len(values)), *(f"{percentile(values, q):.1f}" for q in (0.5, 0.95, 0.99))
        )
    return table


def headline(tally: Tally, elapsed: float, dead: int) -> str:
    rate = tally.done / elapsed if elapsed > 0 else 0.0
    return (
        f"{tally.done} tasks in {elapsed:.1f} s = {rate:.0f} tasks/s; "
        f"{tally.failed} failed, {dead} dead-lettered"
    )


# What each outcome other than success means in the demo's own workload.
OUTCOMES = {
    "invalid_input": f"risk checks for contract {UNKNOWN_SYMBOL}, which the reference data "
    "lacks, injected on purpose to show a rejected task",
}


def outcomes(errors: dict[str, int]) -> list[str]:
    return [
        f"  {code}={n}" + (f": {OUTCOMES[code]}" if code in OUTCOMES else "")
        for code, n in sorted(errors.items())
    ]


def demo_settings_and_config(config_arg: str | None) -> tuple[Settings, FileConfig, Path | None]:
    """The settings, the config and its file; with no file at all (the demo run from
    anywhere), the example agents, which the demo writes to a file for its workers."""
    settings = load_settings()
    if config_arg:
        settings = settings.model_copy(update={"config": Path(config_arg)})
    path = settings.config_path()
    if settings.config is None and not path.exists():
        return settings, demo_config(), None
    config = load_config(path)
    missing = {n: p for n, p in AGENT_CLASSES.items() if n not in config.agents}
    if not missing:
        return settings, config, path.resolve()
    # The demo runs a worker per example agent: one the file lacks is added, and the
    # workers are given the demo's copy of the config (written next to their logs).
    added = {n: AgentEntry.model_validate({"class": p}) for n, p in missing.items()}
    return settings, config.model_copy(update={"agents": {**config.agents, **added}}), None


def main(args: argparse.Namespace) -> int:
    if args.pipelines < 0:
        raise ConfigError(f"--pipelines must be 0 or more, not {args.pipelines}")
    if args.graphs < 0:
        raise ConfigError(f"--graphs must be 0 or more, not {args.graphs}")
    if not demo_graph.available():
        args.graphs = 0  # without the extra, the demo runs without its graphs
    base, config, config_path = demo_settings_and_config(args.config)
    if base.redis_url is not None:  # before PostgreSQL and the simulator are started
        require_reachable(base.redis_url.get_secret_value(), cluster=base.redis_cluster)
    prefix = f"demo-{uuid.uuid4().hex[:6]}"
    settings = base.model_copy(update={"prefix": prefix, "outbox": not args.no_audit})
    console = cli_console()
    if not args.verbose:  # the demo prints its own progress; library logs go to -v
        logging.getLogger("deepagents").setLevel(logging.WARNING)
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(embedded_redis_if_needed(settings))
        if settings.redis_url is None:
            console.print(f"[dim]started an embedded Redis at {url}[/dim]")
        env = {"DEEPAGENTS_OUTBOX": "true" if settings.outbox else "false"}
        if not args.no_model_simulator:
            env["DEEPAGENTS_SIM_MODEL_URL"] = stack.enter_context(model_simulator())
            console.print(f"[dim]model SIMULATOR at {env['DEEPAGENTS_SIM_MODEL_URL']}[/dim]")
        db_url = None
        if not args.no_audit:
            require_extra("audit", "the demo's audit log (or --no-audit)")
            from deepagents.store.audit.embedded import database_if_needed

            db_url = stack.enter_context(database_if_needed(settings))
            if settings.database_url is None:
                console.print("[dim]started an embedded PostgreSQL for the audit log[/dim]")
        log_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="deepagents-demo-")))
        config_file = str(config_path or write_config(config, log_dir / "deepagents.yaml"))
        classes = running(args.graphs)
        procs = start_workers(url, prefix, config_file, args.workers, env, log_dir, classes)
        try:
            return run(_demo(url, db_url, config, settings, procs, args, console, log_dir))
        finally:
            stop_workers(procs)
            # After the workers: a worker still running re-creates its streams and groups.
            # An unreachable Redis has said so already; this must not hide that error.
            with contextlib.suppress(DeepAgentsError):
                run(_forget(url, settings.prefix))


@contextlib.contextmanager
def model_simulator() -> Iterator[str]:
    """``deepagents sim-model`` in its own process (a SIMULATOR, not a model)."""
    port = free_port()
    proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
        [
            sys.executable,
            "-m",
            "deepagents",
            "sim-model",
            "--port",
            str(port),
            "--latency-ms",
            "15",
            "--completion-tokens",
            "40",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            time.sleep(0.05)
        else:
            raise DeepAgentsError("the model simulator did not start")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(10)


async def _demo(
    url: str,
    db_url: str | None,
    config: FileConfig,
    settings: Any,
    procs: list[subprocess.Popen[bytes]],
    args: argparse.Namespace,
    console: Console,
    log_dir: Path,
) -> int:
    async with redis_client(url) as client:
        writer, draining = None, None
        try:
            if db_url is not None:
                writer, draining = await start_audit_writer(client, db_url, config, settings)
            async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
                console.print(f"waiting for {len(procs)} worker process(es)…")
                await wait_for_workers(orch, procs, log_dir, names=running(args.graphs))
                console.print(
                    f"submitting {args.tasks} tasks at {args.rate:.0f}/s (10% urgent trades → p0, "
                    "30% trades → p1, 30% risk checks and 30% research → p2)"
                )
                tally = Tally()
                replies = {demo_graph.AGENT: demo_graph.APPROVAL}
                async with approving(orch, replies) as approver:
                    pipelines = asyncio.create_task(run_pipelines(orch, args.pipelines, args.seed))
                    graphs = asyncio.create_task(demo_graph.run_graphs(orch, args.graphs))
                    elapsed = await drive(orch, args, tally, console)
                    runs, graph_runs = await pipelines, await graphs
                status = await Admin.from_client(client, config, settings).status()
                dead = sum(
                    row["dead_letters"] for row in status if row["tier"] == config.tier_names[0]
                )
                console.print(headline(tally, elapsed, dead))
                console.print(summary(tally))
                if tally.errors:
                    console.print("outcomes other than success:", *outcomes(tally.errors), sep="\n")
                if args.pipelines:
                    console.print(pipeline_line(runs, len(approver.approved)))
                if args.graphs:
                    answered = approver.by_agent.get(demo_graph.AGENT, 0)
                    console.print(demo_graph.graph_line(graph_runs, answered))
            if writer is not None and db_url is not None:
                await show_trails(writer, db_url, settings, tally, runs, console)
        finally:
            if writer is not None and draining is not None:
                writer.stop()
                await draining
    return 0


async def _forget(url: str, prefix: str) -> None:
    """Delete the demo's throwaway keys (its prefix is its own)."""
    async with redis_client(url) as client:
        await drop_prefix(client, prefix)


async def start_audit_writer(
    client: Any, db_url: str, config: FileConfig, settings: Any
) -> tuple[Any, asyncio.Task[None]]:
    from deepagents.store.audit.migrate import migrate
    from deepagents.store.audit.writer import AuditWriter

    await migrate(db_url, settings.audit_schema)
    writer = AuditWriter(client, settings=settings, config=config, dsn=db_url, scan_s=1.0)
    return writer, asyncio.create_task(writer.run())


async def show_trails(
    writer: Any, db_url: str, settings: Any, tally: Tally, runs: PipelineRuns, console: Console
) -> None:
    """The audit trails of a research task (its model call) and of a research pipeline (its
    steps, each with its phase, duration, tokens and cost; its question and the reply)."""
    from deepagents.cli.audit import show_task_trail

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        # Streams the writer has not found yet (its scan runs every second) count too: a
        # short demo can end before its scan has seen every agent's outbox.
        await writer.outbox.discover(force=True)
        if not (await writer.backlog()).total:
            break
        await asyncio.sleep(0.2)  # the backlog lives in Redis: poll it
    pipeline = runs.task_ids[0] if runs.task_ids else None
    for what, task_id in (("research task", tally.sample_task), ("research pipeline", pipeline)):
        if task_id is None:
            continue
        console.print(f"\naudit trail of {what} {task_id} (deepagents audit show {task_id}):")
        await show_task_trail(db_url, settings.audit_schema, task_id, console)
