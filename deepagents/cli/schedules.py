"""``deepagents schedules list|pause|resume|trigger``: the config's recurring schedules, by
hand (docs/scheduling.md). Pausing is a key in Redis that every scheduler reads at each
tick, so it holds whichever scheduler leads; a trigger fires the schedule's task now, with
an id of its own (``sched.<name>.trigger.<ms>``), and needs no scheduler running."""

from __future__ import annotations

import argparse
import getpass
import socket
import sys
import time
from datetime import UTC, datetime
from typing import Any

import orjson

from deepagents.cli.common import load_runtime, redis_client, require_redis_url, run
from deepagents.errors import ConfigError
from deepagents.orchestrator import Orchestrator
from deepagents.orchestrator.schedules import schedule_views, trigger_task
from deepagents.store.schedule_cursors import ScheduleCursors
from deepagents.transport.keys import Keys


def register(sub: Any) -> None:
    p = sub.add_parser("schedules", help="list, pause, resume or trigger recurring schedules")
    ssub = p.add_subparsers(dest="schedules_command", required=True, metavar="ACTION")
    ssub.add_parser("list", help="each schedule: rhythm, policies, paused, last and next slot")
    for action, text in (
        ("pause", "stop firing a schedule (its slots are passed over) until resumed"),
        ("resume", "fire a paused schedule again, from its next slot"),
        ("trigger", "fire a schedule's task now, with an id of its own"),
    ):
        ssub.add_parser(action, help=text).add_argument("name", metavar="NAME")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    runtime = load_runtime(args.config)
    url = require_redis_url(runtime.settings)
    schedules = runtime.config.schedules
    name = getattr(args, "name", None)
    if name is not None and name not in schedules:
        known = ", ".join(sorted(schedules)) or "none"
        raise ConfigError(f"no schedule {name!r} in the config (schedules: {known})")

    async def act() -> list[dict[str, Any]]:
        async with redis_client(url, cluster=runtime.settings.redis_cluster) as client:
            cursors = ScheduleCursors(client, Keys(runtime.settings.prefix))
            command = args.schedules_command
            if command == "list":
                return await schedule_views(cursors, schedules)
            assert name is not None
            if command == "pause":
                await cursors.pause(name, f"{_actor()} {datetime.now(UTC).isoformat()}")
                return [{"schedule": name, "paused": True}]
            if command == "resume":
                was = await cursors.resume(name)
                return [{"schedule": name, "paused": False, "was_paused": was}]
            async with Orchestrator.from_client(
                client, config=runtime.config, settings=runtime.settings
            ) as orch:
                at = int(time.time() * 1000)
                handle = await orch.submit(trigger_task(name, schedules[name], at))
                return [{"schedule": name, "task_id": handle.task_id, "tier": handle.tier}]

    for row in run(act()):
        sys.stdout.write(orjson.dumps(row).decode() + "\n")
    return 0


def _actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"cli:{user}@{socket.gethostname()}"
