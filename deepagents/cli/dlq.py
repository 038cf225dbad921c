"""``deepagents dlq list|show|replay|purge``: inspect and replay dead letters."""

from __future__ import annotations

import argparse
import re
import sys
from datetime import UTC, datetime
from typing import Any

import orjson
from rich.table import Table

from deepagents.cli.common import console as cli_console
from deepagents.cli.common import load_runtime, redis_client, require_redis_url, run
from deepagents.cli.publish import parse_payload
from deepagents.errors import ConfigError
from deepagents.orchestrator.admin import Admin


def register(sub: Any) -> None:
    p = sub.add_parser("dlq", help="inspect, replay or purge dead letters")
    dsub = p.add_subparsers(dest="dlq_command", required=True, metavar="ACTION")
    lst = dsub.add_parser("list", help="list dead letters")
    lst.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    show = dsub.add_parser("show", help="show one dead letter")
    show.add_argument("entry_id", help="a dead letter's id, as dlq list prints it")
    replay = dsub.add_parser("replay", help="put a dead letter back on its stream")
    replay.add_argument("entry_id", help="a dead letter's id, as dlq list prints it")
    replay.add_argument("--payload", help="replace the task's payload (a JSON object)")
    replay.add_argument("--task", help="replace the whole task (JSON), for undecodable entries")
    purge = dsub.add_parser("purge", help="delete dead letters")
    purge.add_argument("entry_ids", nargs="*", help="ids to delete (default: all)")
    purge.add_argument("--yes", action="store_true", help="needed to delete all of them")
    for parser in (lst, show, replay, purge):
        parser.add_argument("--agent", help="only this agent type")
        parser.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=main)


# A stream entry id: milliseconds, optionally "-" and a sequence number.
_ENTRY_ID = re.compile(r"^\d{1,20}(-\d{1,20})?$")


def _check_ids(ids: list[str]) -> None:
    """Refuse what cannot be an entry id before Redis does ('Invalid stream ID')."""
    for entry_id in ids:
        if not _ENTRY_ID.match(entry_id):
            raise ConfigError(
                f"{entry_id!r} is not a dead-letter id: ids look like 1712345678901-0 "
                "(see `deepagents dlq list`)"
            )


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S") if ms else "-"


def _print(args: argparse.Namespace, data: Any, table: Table | None = None) -> None:
    if args.json or table is None:
        sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        cli_console().print(table)


async def _run(args: argparse.Namespace, admin: Admin) -> int:
    action = args.dlq_command
    _check_ids([*getattr(args, "entry_ids", []), *filter(None, [getattr(args, "entry_id", "")])])
    if action == "list":
        entries = await admin.list_dead(args.agent, args.limit)
        table = Table(title=f"{len(entries)} dead letter(s)")
        for col in ("id", "agent", "task", "reason", "deliveries", "dead at", "error"):
            table.add_column(col)
        for e in entries:
            table.add_row(
                e.entry_id,
                e.agent,
                e.task_id or "-",
                e.reason,
                str(e.deliveries),
                _when(e.dead_ms),
                e.error[:80],
            )
        _print(args, [e.as_dict() for e in entries], table)
    elif action == "show":
        _print(args, (await admin.find_dead(args.entry_id, args.agent)).as_dict())
    elif action == "replay":
        payload = parse_payload(args.payload) if args.payload else None
        dead, new_id = await admin.replay(
            args.entry_id, agent=args.agent, payload=payload, task_json=args.task
        )
        replayed = {
            "replayed": dead.entry_id,
            "task_id": dead.task_id,
            "agent": dead.agent,
            "new_entry": new_id,
        }
        _say(args, replayed, f"replayed {dead.entry_id} (task {dead.task_id}) as {new_id}")
    else:
        if not args.entry_ids and not args.yes:
            raise ConfigError("purging every dead letter needs --yes (or name the ids)")
        purged = await admin.purge(args.agent, args.entry_ids or None)
        _say(args, {"purged": purged}, f"purged {purged} dead letter(s)")
    return 0


def _say(args: argparse.Namespace, data: Any, line: str) -> None:
    """JSON with --json, else one line for a person."""
    if args.json:
        _print(args, data)
    else:
        sys.stdout.write(line + "\n")


def main(args: argparse.Namespace) -> int:
    runtime = load_runtime(args.config)
    url = require_redis_url(runtime.settings)

    async def go() -> int:
        async with redis_client(url, cluster=runtime.settings.redis_cluster) as client:
            return await _run(args, Admin.from_client(client, runtime.config, runtime.settings))

    return run(go())
