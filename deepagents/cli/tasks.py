"""``deepagents tasks waiting``: the tasks waiting for a person's reply, oldest first, with
their questions and ages (answer one with ``deepagents reply``). ``tasks show`` and
``tasks watch`` live in ``tasks_show.py`` and ``tasks_watch.py``."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

import orjson
from rich.table import Table

from deepagents.cli import tasks_show, tasks_watch
from deepagents.cli.common import console, load_runtime, redis_client, require_redis_url, run
from deepagents.errors import ConfigError
from deepagents.orchestrator import Orchestrator
from deepagents.transport.base import Waiting, now_ms


def register(sub: Any) -> None:
    p = sub.add_parser("tasks", help="open questions (waiting); one task's record or events")
    tsub = p.add_subparsers(dest="tasks_command", required=True, metavar="ACTION")
    waiting = tsub.add_parser("waiting", help="tasks waiting for a reply, oldest first")
    waiting.add_argument("--agent", help="only this agent type")
    waiting.add_argument("--tenant", help="only this tenant's tasks")
    waiting.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    waiting.add_argument("--json", action="store_true", help="machine-readable output")
    show = tsub.add_parser("show", help="one task's record: state, attempt, question, result")
    show.add_argument("task_id", help="the id submit or publish returned")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    tasks_watch.register_parser(tsub)
    p.set_defaults(func=dispatch)


def dispatch(args: argparse.Namespace) -> int:
    if args.tasks_command == "show":
        return tasks_show.main(args)
    if args.tasks_command == "watch":
        return tasks_watch.main(args)
    return main(args)


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
