"""``deepagents status``: per stream length, pending, consumers, oldest pending, dead letters."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from deepagents.cli.common import load_runtime, redis_client, require_redis_url, run
from deepagents.orchestrator.admin import Admin


def register(sub: Any) -> None:
    p = sub.add_parser("status", help="per-stream backlog, pending, consumers, dead letters")
    p.add_argument("--agent", help="only this agent type")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--all", action="store_true", help="include empty streams")
    p.set_defaults(func=main)


def render(rows: list[dict[str, Any]], show_all: bool) -> Table:
    table = Table(title="deepagents streams")
    for col in (
        "stream",
        "length",
        "pending",
        "consumers",
        "oldest pending",
        "lag",
        "delayed",
        "dead letters",
    ):
        table.add_column(col, justify="left" if col == "stream" else "right")
    for r in rows:
        if not show_all and not (r["length"] or r["pending"] or r["dead_letters"] or r["delayed"]):
            continue
        table.add_row(
            r["stream"],
            str(r["length"]),
            str(r["pending"]),
            str(r["consumers"]),
            f"{r['oldest_pending_ms'] / 1000:.1f} s",
            "-" if r["lag"] is None else str(r["lag"]),
            str(r["delayed"]),
            str(r["dead_letters"]),
        )
    return table


def main(args: argparse.Namespace) -> int:
    runtime = load_runtime(args.config)
    url = require_redis_url(runtime.settings)

    async def collect() -> list[dict[str, Any]]:
        async with redis_client(url) as client:
            return await Admin(client, runtime.config, runtime.settings.prefix).status(args.agent)

    rows = run(collect())
    if args.json:
        sys.stdout.write(orjson.dumps(rows).decode() + "\n")
    else:
        Console().print(render(rows, args.all))
    return 0
