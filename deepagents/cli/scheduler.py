"""``deepagents scheduler``: fires the config's recurring ``schedules`` (docs/scheduling.md).
Run one or more per fleet: a Redis lease lets exactly one fire, another takes over within
the lease's TTL when it dies, and each slot's task id (derived from the schedule and the
slot) keeps two leaders from firing one slot twice."""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import uuid
from typing import Any

from deepagents.cli.common import load_runtime, redis_client, require_redis_url, run
from deepagents.cli.signals import on_stop
from deepagents.errors import ConfigError
from deepagents.orchestrator import Orchestrator
from deepagents.orchestrator.schedules import Scheduler
from deepagents.store.lease import RedisLease
from deepagents.store.schedule_cursors import ScheduleCursors
from deepagents.telemetry.serve import serve_metrics, stop_server


def register(sub: Any) -> None:
    p = sub.add_parser(
        "scheduler", help="fire the config's recurring schedules (one leader per fleet)"
    )
    p.add_argument("--interval", type=_positive, default=0.2, help="seconds between ticks")
    p.add_argument(
        "--lease-ttl", type=_positive, default=5.0, help="seconds a dead leader holds the lease"
    )
    p.add_argument("--id", help="this scheduler's name in the lease and the logs")
    p.add_argument(
        "--metrics-port",
        type=int,
        help="serve /metrics here (firings by outcome, lateness; see docs/reference/metrics.md)",
    )
    p.set_defaults(func=main)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} must be above 0")
    return value


def _check_intents(orch: Orchestrator) -> None:
    """A schedule whose intent no agent serves would be refused at every slot: say so now.
    So would a jitter past how far ahead a task may be scheduled."""
    horizon = orch.settings.max_schedule_ahead_s
    for name, schedule in sorted(orch.config.schedules.items()):
        if schedule.intent not in orch.router.by_intent:
            raise ConfigError(
                f"schedules.{name}: no agent serves intent {schedule.intent!r} "
                f"(known: {orch.router.known_intents()})"
            )
        if schedule.jitter_s > horizon:
            raise ConfigError(
                f"schedules.{name}: jitter_s {schedule.jitter_s:g} is beyond "
                f"DEEPAGENTS_MAX_SCHEDULE_AHEAD_S ({horizon}); its delayed tasks would be refused"
            )


def main(args: argparse.Namespace) -> int:
    runtime = load_runtime(args.config)
    url = require_redis_url(runtime.settings)
    if not runtime.config.schedules:
        raise ConfigError("the config has no schedules: section; nothing to fire")
    owner = args.id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    lease_ttl = max(args.lease_ttl, args.interval * 3)  # a leader renews twice per TTL at least

    async def schedule() -> None:
        async with (
            redis_client(url, cluster=runtime.settings.redis_cluster) as client,
            Orchestrator.from_client(
                client, config=runtime.config, settings=runtime.settings
            ) as orch,
        ):
            _check_intents(orch)
            lease = RedisLease(
                client, orch.keys.schedules_lease, owner, int(lease_ttl * 1000), what="schedules"
            )
            cursors = ScheduleCursors(client, orch.keys)
            metrics = orch.telemetry.metrics
            scheduler = Scheduler(
                orch,
                runtime.config.schedules,
                cursors,
                lease,
                interval_s=args.interval,
                metrics=metrics.schedule if metrics is not None else None,
            )
            server = serve_metrics(orch.telemetry, args.metrics_port, runtime.settings.metrics_host)
            stop = asyncio.Event()
            try:
                with on_stop(asyncio.get_running_loop(), stop.set, stop.set):
                    await scheduler.run(stop)
            finally:
                if server is not None:
                    stop_server(server)

    run(schedule())
    return 0
