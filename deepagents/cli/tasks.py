"""``deepagents tasks waiting``: the tasks waiting for a person's reply, oldest first, with
their questions and ages (answer one with ``deepagents reply``). ``deepagents tasks show``:
one task's state, its parent and its children (``ctx.delegate``)."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

import orjson
from rich.table import Table

from deepagents.cli.common import console, load_runtime, redis_client, require_redis_url, run
from deepagents.errors import ConfigError
from deepagents.orchestrator import Orchestrator
from deepagents.orchestrator.children import children_of
from deepagents.transport.base import Waiting, now_ms


def register(sub: Any) -> None:
    p = sub.add_parser("tasks", help="tasks: waiting (open questions), show (one task)")
    tsub = p.add_subparsers(dest="tasks_command", required=True, metavar="ACTION")
    waiting = tsub.add_parser("waiting", help="tasks waiting for a reply, oldest first")
    waiting.add_argument("--agent", help="only this agent type")
    waiting.add_argument("--tenant", help="only this tenant's tasks")
    waiting.add_argument("--limit", type=int, default=100)
    waiting.add_argument("--json", action="store_true", help="machine-readable output")
    show = tsub.add_parser("show", help="one task: state, result, parent and children")
    show.add_argument("task_id")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=main)


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _age(ms: int) -> str:
    seconds = max(0, now_ms() - ms) // 1000
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"


def _row(w: Waiting) -> dict[str, Any]:
    return {
        "task_id": w.task_id,
        "agent": w.agent,
        "ask": w.ask,
        "question": w.question,
        "asked_ms": w.asked_ms,
        "age_s": round(max(0, now_ms() - w.asked_ms) / 1000, 3),
        "timeout_ms": w.due_ms,
        "on_timeout": w.on_timeout,
    }


def main(args: argparse.Namespace) -> int:
    if args.tasks_command == "show":
        return show(args)
    runtime = load_runtime(args.config)
    url = require_redis_url(runtime.settings)
    if args.limit < 1:
        raise ConfigError(f"--limit must be at least 1, not {args.limit}")

    async def listing() -> list[Waiting]:
        async with (
            redis_client(url, cluster=runtime.settings.redis_cluster) as client,
            Orchestrator.from_client(
                client, config=runtime.config, settings=runtime.settings
            ) as orch,
        ):
            return await orch.waiting(args.agent, args.limit, tenant=args.tenant)

    found = run(listing())
    if args.json:
        print(orjson.dumps([_row(w) for w in found]).decode())
        return 0
    if not found:
        print("no task is waiting for a reply")
        return 0
    table = Table(title="tasks waiting for a reply")
    for col in ("task", "agent", "question", "age", "times out", "then"):
        table.add_column(col)
    for w in found:
        table.add_row(
            w.task_id, w.agent, w.question, _age(w.asked_ms), _when(w.due_ms), w.on_timeout
        )
    console().print(table)
    return 0


def show(args: argparse.Namespace) -> int:
    """One task as the orchestrator finds it, with each child's state: one line and exit 1
    when there is no such task (or it expired)."""
    runtime = load_runtime(args.config)
    url = require_redis_url(runtime.settings)

    async def found() -> dict[str, Any] | None:
        async with (
            redis_client(url, cluster=runtime.settings.redis_cluster) as client,
            Orchestrator.from_client(
                client, config=runtime.config, settings=runtime.settings
            ) as orch,
        ):
            info = await orch.lookup(args.task_id)
            if info is None:
                return None
            kids = children_of(info)
            states = [await orch.task_state(kid) for kid in kids]
            return _shown(args.task_id, info, dict(zip(kids, states, strict=True)))

    view = run(found())
    if view is None:
        print(f"error: no task {args.task_id} (or it expired)", file=sys.stderr)
        return 1
    if args.json:
        print(orjson.dumps(view).decode())
        return 0
    table = Table(title=f"task {args.task_id}", show_header=False)
    for name in ("state", "agent", "shard", "tier", "parent_id", "status", "error"):
        if view.get(name) not in (None, ""):
            table.add_row(name, str(view[name]))
    for child in view["children"]:
        table.add_row("child", f"{child['task_id']} ({child['state'] or 'expired'})")
    console().print(table)
    return 0


def _shown(task_id: str, info: dict[str, Any], children: dict[str, str | None]) -> dict[str, Any]:
    result = orjson.loads(info["result"]) if info.get("result") else {}
    error = result.get("error") or {}
    return {
        "task_id": task_id,
        "state": info.get("state"),
        "agent": info.get("agent"),
        "shard": info.get("shard"),
        "tier": info.get("tier") or info.get("submitted_tier"),
        "parent_id": info.get("parent_id"),
        "status": result.get("status"),
        "error": error.get("code"),
        "children": [{"task_id": k, "state": v} for k, v in children.items()],
    }
