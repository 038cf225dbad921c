"""``deepagents status``: per stream length, pending, consumers, live readers, oldest
pending, dead letters, and the streams no live worker reads; ``--watch`` refreshes a live
view (with agent health, and throughput and p95 per tier from the workers' ``/metrics``
given with ``--metrics``)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from deepagents.cli.common import (
    Runtime,
    console,
    load_runtime,
    redis_client,
    require_redis_url,
    run,
)
from deepagents.compose import services_for
from deepagents.config.schema import FileConfig
from deepagents.orchestrator.admin import Admin
from deepagents.orchestrator.coverage import Coverage, coverage
from deepagents.orchestrator.schedules import schedule_views
from deepagents.store.base import Registry
from deepagents.store.schedule_cursors import ScheduleCursors
from deepagents.telemetry.watch import Snapshot, p95, snapshot, throughput
from deepagents.transport.keys import Keys


def register(sub: Any) -> None:
    p = sub.add_parser("status", help="per-stream backlog, pending, consumers, dead letters")
    p.add_argument("--agent", help="only this agent type")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--all", action="store_true", help="include empty streams")
    p.add_argument("--watch", action="store_true", help="refresh a live view in place")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes")
    p.add_argument("--iterations", type=int, default=0, help="with --watch: stop after N refreshes")
    p.add_argument(
        "--metrics",
        action="append",
        default=[],
        metavar="URL",
        help="a worker's /metrics URL (repeatable): adds throughput and p95 per tier",
    )
    p.set_defaults(func=main)


EMPTY_HINT = "no stream holds a task, a pending entry, a delayed task or a dead letter"


def _busy(row: dict[str, Any]) -> bool:
    return bool(
        row["length"] or row.get("fair") or row["pending"] or row["dead_letters"] or row["delayed"]
    )


def render(rows: list[dict[str, Any]], show_all: bool) -> Table:
    """One row per tier stream. Delayed tasks and dead letters belong to the shard (one
    sorted set and one dead-letter stream for all its tiers), so they are shown once, on
    the shard's first row, and the columns add up."""
    hidden = None if show_all else "streams holding nothing are hidden; --all shows every stream"
    table = Table(title="deepagents streams", caption=hidden)
    for col in (
        "stream",
        "length",
        "pending",
        "consumers",
        "readers",
        "oldest pending",
        "lag",
        "fair queue",
        "delayed (shard)",
        "dead letters (shard)",
    ):
        table.add_column(col, justify="left" if col == "stream" else "right")
    shown: set[tuple[str, int]] = set()
    for r in rows:
        if not show_all and not _busy(r):
            continue
        shard = (r["agent"], r["shard"])
        first = shard not in shown
        shown.add(shard)
        table.add_row(
            r["stream"],
            str(r["length"]),
            str(r["pending"]),
            str(r["consumers"]),
            "-" if r.get("readers") is None else str(r["readers"]),
            f"{r['oldest_pending_ms'] / 1000:.1f} s",
            "-" if r["lag"] is None else str(r["lag"]),
            str(r.get("fair", 0)),
            str(r["delayed"]) if first else "",
            str(r["dead_letters"]) if first else "",
        )
    if not table.rows:
        table.caption = f"{EMPTY_HINT}; --all shows every stream"
    return table


def render_unread(covered: dict[str, Coverage]) -> Table:
    """The streams no live worker reads: their tasks wait until one does."""
    table = Table(title="not read by any live worker")
    table.add_column("gap", justify="left")
    for c in covered.values():
        for line in c.summary():
            table.add_row(line)
    if not table.rows:
        table.caption = "every tier and shard has a live reader"
    return table


async def _coverage(
    registry: Registry, config: FileConfig, agents: list[str], rows: list[dict[str, Any]]
) -> dict[str, Coverage]:
    """Coverage per agent; each row gets its stream's count of live readers."""
    covered = {name: await coverage(registry, config, name) for name in agents}
    for row in rows:
        c = covered.get(row["agent"])
        if c is not None:
            row["readers"] = c.readers.get((row["tier"], row["shard"]), 0)
    return covered


def render_health(health: dict[str, dict[str, Any]]) -> Table:
    """One row per agent type; ``circuit`` is a remote agent's fleet-wide breaker, and
    ``why`` the reason an instance's last health check failed (its service down)."""
    table = Table(title="agents")
    for col in ("agent", "live", "healthy", "health", "circuit", "why"):
        table.add_column(col, justify="left" if col in ("agent", "why") else "right")
    for name, h in health.items():
        table.add_row(
            name,
            str(h["fresh"]),
            str(h["healthy"]),
            f"{h['ratio']:.0%}",
            h.get("circuit") or "-",
            "; ".join([*_dead(h.get("dead") or ()), *([h["detail"]] if h.get("detail") else [])]),
        )
    return table


def render_schedules(views: list[dict[str, Any]]) -> Table:
    """The config's recurring schedules (``deepagents schedules list``, as a table)."""
    table = Table(title="schedules")
    for col in ("schedule", "rhythm", "paused", "last slot", "next slot", "buffered"):
        table.add_column(col, justify="left")
    for v in views:
        rhythm = f"every {v['every_s']:g} s" if v["every_s"] else f"{v['cron']} {v['timezone']}"
        table.add_row(
            v["schedule"],
            rhythm,
            "paused" if v["paused"] else "-",
            v["last_slot"] or "-",
            v["next_slot"] or "-",
            v["buffered"] or "-",
        )
    return table


def _dead(dead: Any) -> list[str]:
    """``<instance> dead since <UTC time>``: a heartbeat lapsed, until it is forgotten."""
    out = []
    for d in dead:
        since = datetime.fromtimestamp(d["since_ms"] / 1000, UTC).strftime("%H:%M:%SZ")
        out.append(f"{d['instance']} dead since {since}")
    return out


def render_tiers(tiers: dict[str, dict[str, float | None]]) -> Table:
    table = Table(title="tiers (from --metrics)")
    for col in ("tier", "tasks/s", "p95"):
        table.add_column(col, justify="left" if col == "tier" else "right")
    for tier, t in sorted(tiers.items()):
        rate, p = t.get("per_s"), t.get("p95_s")
        table.add_row(
            tier, "-" if rate is None else f"{rate:.1f}", "-" if p is None else f"{p * 1000:.0f} ms"
        )
    return table


async def _health(
    registry: Registry, config: FileConfig, admin: Admin
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name in admin.agents:
        stale_ms = config.agent_settings(name).dead_after_ms
        h = (await registry.health([name], stale_ms=stale_ms))[name]
        out[name] = {**asdict(h), "ratio": h.ratio}
    return out


async def _scrape(http: httpx.AsyncClient, urls: list[str]) -> Snapshot | None:
    if not urls:
        return None
    texts = []
    for url in urls:
        try:
            reply = await http.get(url, timeout=2.0)
            texts.append(reply.text)
        except httpx.HTTPError:
            continue  # a worker that went away: the others still count
    return snapshot(texts, time.monotonic())


def _tiers(before: Snapshot | None, after: Snapshot | None) -> dict[str, dict[str, float | None]]:
    if before is None or after is None:
        return {}
    rates, p95s = throughput(before, after), p95(before, after)
    return {t: {"per_s": rates.get(t), "p95_s": p95s.get(t)} for t in {*rates, *p95s}}


async def watch(args: argparse.Namespace, url: str, runtime: Runtime) -> None:
    console = Console()
    config = runtime.config
    cluster = runtime.settings.redis_cluster
    async with redis_client(url, cluster=cluster) as client, httpx.AsyncClient() as http:
        services = services_for(client, runtime.settings)
        admin = Admin(services.bus, services.tasks, config)
        before = await _scrape(http, args.metrics)
        with Live(console=console, auto_refresh=False, transient=False) as live:
            n = 0
            while not args.iterations or n < args.iterations:
                rows = await admin.status(args.agent)
                agents = [args.agent] if args.agent else admin.agents
                covered = await _coverage(services.registry, config, agents, rows)
                health = await _health(services.registry, config, admin)
                after = await _scrape(http, args.metrics)
                tiers = _tiers(before, after)
                before = after
                if args.json:
                    line = {
                        "ts": time.time(),
                        "streams": rows,
                        "health": health,
                        "tiers": tiers,
                        "coverage": {n: c.as_json() for n, c in covered.items()},
                    }
                    sys.stdout.write(orjson.dumps(line).decode() + "\n")
                    sys.stdout.flush()
                else:
                    view = [render(rows, args.all), render_unread(covered), render_health(health)]
                    if args.metrics:
                        view.append(render_tiers(tiers))
                    live.update(Group(*view), refresh=True)
                n += 1
                if not args.iterations or n < args.iterations:
                    await asyncio.sleep(args.interval)


def main(args: argparse.Namespace) -> int:
    runtime = load_runtime(args.config)
    url = require_redis_url(runtime.settings)
    if args.watch:  # Ctrl-C ends it (the CLI answers 130)
        run(watch(args, url, runtime))
        return 0

    async def collect() -> tuple[
        list[dict[str, Any]],
        dict[str, dict[str, Any]],
        dict[str, Coverage],
        list[dict[str, Any]],
    ]:
        async with redis_client(url, cluster=runtime.settings.redis_cluster) as client:
            services = services_for(client, runtime.settings)
            admin = Admin(services.bus, services.tasks, runtime.config)
            health = await _health(services.registry, runtime.config, admin)
            rows = await admin.status(args.agent)
            agents = [args.agent] if args.agent else admin.agents
            covered = await _coverage(services.registry, runtime.config, agents, rows)
            cursors = ScheduleCursors(client, Keys(runtime.settings.prefix))
            views = await schedule_views(cursors, runtime.config.schedules)
            return rows, health, covered, views

    rows, health, covered, views = run(collect())
    if args.json:  # each row's "readers" names a stream no live worker reads (0)
        sys.stdout.write(orjson.dumps(rows).decode() + "\n")
    else:  # what one frame of --watch shows, and the schedules
        tables = [render(rows, args.all), render_unread(covered), render_health(health)]
        console().print(*tables, *([render_schedules(views)] if views else []))
    return 0
