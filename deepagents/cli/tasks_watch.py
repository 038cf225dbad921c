"""``deepagents tasks watch TASK_ID``: follow one task's audit events as they happen (the
outbox in Redis, and the audit store when DEEPAGENTS_DATABASE_URL is set), one line each,
until its result; ``--after EVENT_ID`` resumes after an event already seen."""

from __future__ import annotations

import argparse
import asyncio
import re
from typing import Any

import orjson

from deepagents.cli.common import load_runtime, redis_client, require_redis_url, run
from deepagents.cli.task_lookup import TaskNotFound, checked_task_id
from deepagents.errors import InvalidPayload
from deepagents.orchestrator import Orchestrator
from deepagents.store.audit.task_events import TaskEvent, TaskEventFollower, TaskEventLog

POLL_S = 0.25
_EVENT_ID = re.compile(r"[0-9a-f-]{36}")
# What a line shows of an event besides its time and type, when the event has it.
_SHOWN = (
    "agent", "attempt", "deliveries", "status", "error_code", "error", "reason", "model",
    "latency_ms", "cost_usd",
)  # fmt: skip


def line(event: TaskEvent) -> str:
    data = event.data
    parts = [str(data.get("ts", "")), event.type]
    parts += [f"{k}={data[k]}" for k in _SHOWN if k in data]
    detail = data.get("detail")
    if isinstance(detail, dict):
        parts += [f"{k}={detail[k]}" for k in ("step", "phase", "ask", "question") if k in detail]
    return "  ".join(parts)


def _printed(event: TaskEvent, as_json: bool) -> str:
    return orjson.dumps(event.data).decode() if as_json else line(event)


def main(args: argparse.Namespace) -> int:
    task_id = checked_task_id(args.task_id)
    if args.after is not None and not _EVENT_ID.fullmatch(args.after):
        raise InvalidPayload(f"--after {args.after!r} is not an event id (a UUID)")
    runtime = load_runtime(args.config)
    url = require_redis_url(runtime.settings)

    async def watch() -> int:
        async with (
            redis_client(url, cluster=runtime.settings.redis_cluster) as client,
            Orchestrator.from_client(
                client, config=runtime.config, settings=runtime.settings
            ) as orch,
        ):
            location = await orch.tasks.location(task_id)
            if location is None:
                raise TaskNotFound(f"no task {task_id} (unknown, or its records expired)")
            log = TaskEventLog(client, orch.keys, runtime.settings)
            try:
                await _follow(TaskEventFollower(log, location, task_id, args.after), args.json)
            finally:
                await log.aclose()
        return 0

    return run(watch())


async def _follow(follower: TaskEventFollower, as_json: bool) -> None:
    while True:
        fresh = await follower.poll()
        for event in fresh:
            print(_printed(event, as_json), flush=True)
        if any(e.final for e in fresh):
            return
        await asyncio.sleep(POLL_S)


def register_parser(tsub: Any) -> None:
    p: Any = tsub.add_parser("watch", help="follow a task's events until its result")
    p.add_argument("task_id")
    p.add_argument("--after", metavar="EVENT_ID", help="resume after this event")
    p.add_argument("--json", action="store_true", help="one JSON object per event")
