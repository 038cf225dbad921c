"""``deepagents audit show TASK_ID | trace TRACE_ID | cost --since 1d [--by ...]``.

Tables by default, ``--json`` for machines. Every user value reaches SQL as a parameter.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
from rich.console import Console
from rich.table import Table

from deepagents._internal.extras import require_extra
from deepagents.cli.common import console as cli_console
from deepagents.cli.common import run
from deepagents.config import load_settings
from deepagents.errors import DeepAgentsError, ErrorCode

if TYPE_CHECKING:
    from deepagents.store.audit.repository import AuditRepository

T = TypeVar("T")
_SPAN = re.compile(r"^(\d+)([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")
# AuditRepository's COST_GROUPS, spelled out so that building the parser needs no asyncpg
# (the [audit] extra); tests/deploy/test_slim_install.py keeps the two equal.
COST_GROUPS = ("agent", "tenant", "model")


class AuditQueryError(DeepAgentsError):
    """The audit query cannot be answered as asked."""

    code = ErrorCode.INVALID_INPUT


def register(sub: Any) -> None:
    p = sub.add_parser("audit", help="query the audit log (PostgreSQL)")
    q = p.add_subparsers(dest="audit_query", required=True, metavar="QUERY")
    show = q.add_parser("show", help="every recorded step of one task")
    show.add_argument("task_id")
    show.set_defaults(func=_show)
    trace = q.add_parser("trace", help="every event of one trace (W3C trace id, 32 hex digits)")
    trace.add_argument("trace_id")
    trace.set_defaults(func=_trace)
    cost = q.add_parser("cost", help="tokens and cost over a time window")
    cost.add_argument("--since", default="1d", help="30m, 12h, 1d, 2w or an ISO time (default 1d)")
    cost.add_argument("--until", help="ISO time or span ago (default now)")
    cost.add_argument("--by", choices=COST_GROUPS, default="agent")
    cost.set_defaults(func=_cost)
    for parser in (show, trace, cost):
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def parse_when(text: str, now: datetime) -> datetime:
    """``1d`` (that long ago) or an ISO time (UTC when no offset is given)."""
    match = _SPAN.match(text.strip())
    if match:
        return now - timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise AuditQueryError(f"{text!r} is not a time: use 30m, 12h, 1d, 2w or ISO") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _query(
    args: argparse.Namespace, what: str, call: Callable[[AuditRepository], Awaitable[T]]
) -> T:
    require_extra("audit", "`deepagents audit`")
    from deepagents.store.audit.db import database_url
    from deepagents.store.audit.errors import database_errors
    from deepagents.store.audit.repository import AuditRepository

    settings = load_settings()  # the database needs no config file
    url = database_url(settings)

    async def go() -> T:
        async with AuditRepository(url, settings.audit_schema) as repo:
            return await call(repo)

    with database_errors(what):
        return run(go())


def _show(args: argparse.Namespace) -> int:
    rows = _query(args, "audit show", lambda repo: repo.task_events(args.task_id))
    if not rows:
        raise AuditQueryError(f"no audit events for task {args.task_id}")
    _events_out(args, rows, f"task {args.task_id}")
    return 0


def _trace(args: argparse.Namespace) -> int:
    trace_id = args.trace_id.strip().lower()
    if not _TRACE_ID.match(trace_id):
        raise AuditQueryError(f"{args.trace_id!r} is not a W3C trace id (32 hex digits)")
    rows = _query(args, "audit trace", lambda repo: repo.trace_events(trace_id))
    if not rows:
        raise AuditQueryError(f"no audit events for trace {trace_id}")
    _events_out(args, rows, f"trace {trace_id}", with_task=True)
    return 0


def _cost(args: argparse.Namespace) -> int:
    now = datetime.now(UTC)
    since = parse_when(args.since, now)
    until = parse_when(args.until, now) if args.until else now
    if since >= until:
        raise AuditQueryError("--since must be before --until")
    rows = _query(args, "audit cost", lambda repo: repo.cost(since, until, args.by))
    if args.json:
        _json({"since": since, "until": until, "by": args.by, "rows": rows})
        return 0
    table = Table(title=f"cost by {args.by}, {since:%Y-%m-%d %H:%M} to {until:%Y-%m-%d %H:%M} UTC")
    for col, justify in ((args.by, "left"), ("tasks", "right"), ("events", "right"),
                         ("tokens", "right"), ("cost USD", "right")):  # fmt: skip
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        table.add_row(r["key"], str(r["tasks"]), str(r["events"]), f"{r['tokens']:,}",
                      f"{r['cost_usd']:.6f}")  # fmt: skip
    if not rows:
        table.caption = "no events in this window"
    cli_console().print(table)
    return 0


def _events_out(args: argparse.Namespace, rows: list[dict[str, Any]], title: str,
                *, with_task: bool = False) -> None:  # fmt: skip
    if args.json:
        _json(rows)
        return
    cli_console().print(events_table(rows, title, with_task=with_task))


async def show_task_trail(
    url: str, schema: str, task_id: str, console: Console | None = None
) -> int:
    """Print one task's audit trail (the demo's last screen); return how many events."""
    from deepagents.store.audit.repository import AuditRepository

    async with AuditRepository(url, schema) as repo:
        rows = await repo.task_events(task_id)
    if rows:
        (console or cli_console()).print(events_table(rows, f"audit trail of task {task_id}"))
    return len(rows)


def events_table(rows: list[dict[str, Any]], title: str, *, with_task: bool = False) -> Table:
    table = Table(title=title)
    cols = ["time (UTC)", "event", *(["task"] if with_task else []), "agent", "tier", "try",
            "status", "detail", "ms", "tokens", "cost"]  # fmt: skip
    for col in cols:
        table.add_column(col, overflow="fold")
    for r in rows:
        agent = f"{r['agent']}@{r['agent_version']}" if r["agent_version"] else r["agent"]
        detail = " ".join(str(x) for x in (r["error_code"], r["reason"] or r["error"]) if x)
        detail = detail or _step_detail(r) or ask_detail(r) or delegation_detail(r)
        cells = [f"{r['ts']:%H:%M:%S.%f}"[:-3], r["type"], *([r["task_id"]] if with_task else []),
                 agent, r["tier"], r["attempt"], r["status"], detail,
                 _num(r["latency_ms"], "{:.1f}"), _num(r["tokens_used"], "{:,}"),
                 _num(r["cost_usd"], "{:.6f}")]  # fmt: skip
        table.add_row(*("" if c is None else str(c) for c in cells))
    first = rows[0]
    if first.get("trace_id"):
        table.caption = f"trace {first['trace_id']}  ·  {first['ts']:%Y-%m-%d}"
    return table


def _step_detail(row: dict[str, Any]) -> str:
    """A durable step's phase and id (step_completed), or the steps found (resumed)."""
    extra = row.get("detail")
    if not isinstance(extra, dict):
        return ""
    if row["type"] == "step_completed":
        return f"{extra.get('phase', '')} · {extra.get('step', '')} ({extra.get('bytes', 0)} B)"
    if row["type"] == "resumed":
        return f"{extra.get('steps', 0)} steps done before"
    return ""


def ask_detail(row: dict[str, Any]) -> str:
    """A question a task asked a person (waiting), its answer (replied), its wait running
    out (wait_expired) and its escalation (escalated)."""
    extra = row.get("detail")
    if not isinstance(extra, dict):
        return ""
    ask = extra.get("ask", "")
    if row["type"] == "waiting":
        then = extra.get("on_timeout", "") + (", escalated" if extra.get("escalated") else "")
        return f"question {ask}: {extra.get('question', '')} (on timeout: {then})"
    if row["type"] == "replied":
        return f"question {ask} answered"
    if row["type"] == "wait_expired":
        return "nobody answered in time"
    if row["type"] == "escalated":
        return f"question {ask} escalated to {extra.get('escalation_task_id', '')}"
    return ""


def delegation_detail(row: dict[str, Any]) -> str:
    """A parent parked for its children (waiting_children), a child's end recorded on it
    (child_ended), and a child's submit naming its parent (submitted)."""
    extra = row.get("detail")
    if not isinstance(extra, dict):
        return ""
    if row["type"] == "waiting_children":
        children = extra.get("children") or []
        return f"waits for {extra.get('mode', '')} of {len(children)}: {' '.join(children)}"
    if row["type"] == "child_ended":
        return f"child {extra.get('child_id', '')} ended {extra.get('status', '')}"
    if row["type"] == "submitted" and extra.get("parent_id"):
        return f"child of {extra['parent_id']}"
    return ""


def _num(value: Any, fmt: str) -> str:
    return "" if value is None else fmt.format(value)


def _json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2, default=str).decode() + "\n")
