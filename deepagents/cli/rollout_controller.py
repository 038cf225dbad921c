"""``deepagents rollout-controller``: compares each canary with its stable version and
promotes or rolls back (docs/rollouts.md). Run one or more per fleet: a Redis lease lets
exactly one act, and another takes over within the lease's TTL when it dies."""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import uuid
from typing import Any

from deepagents.cli.common import load_runtime, redis_client, require_redis_url, run
from deepagents.cli.signals import on_stop
from deepagents.compose import services_for
from deepagents.orchestrator.rollout_controller import RolloutController
from deepagents.orchestrator.rollout_ops import RolloutOps
from deepagents.store.lease import RedisLease
from deepagents.telemetry.metrics import FleetMetrics
from deepagents.telemetry.serve import serve_registry, stop_server


def register(sub: Any) -> None:
    p = sub.add_parser(
        "rollout-controller", help="promote or roll back canaries from their error rate and p95"
    )
    p.add_argument("--interval", type=_positive, default=5.0, help="seconds between ticks")
    p.add_argument(
        "--lease-ttl", type=_positive, default=15.0, help="seconds a dead leader holds the lease"
    )
    p.add_argument("--id", help="this controller's name in the lease and the audit log")
    p.add_argument("--port", type=int, default=None, help="serve /metrics on this port")
    p.add_argument("--addr", default="0.0.0.0", help="address to bind (default 0.0.0.0)")  # noqa: S104
    p.set_defaults(func=main)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be above 0")
    return value


def main(args: argparse.Namespace) -> int:
    runtime = load_runtime(args.config)
    url = require_redis_url(runtime.settings)
    owner = args.id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    if args.lease_ttl <= args.interval:
        args.lease_ttl = args.interval * 3  # a leader renews at least twice per TTL
    metrics = FleetMetrics()
    server = serve_registry(metrics.registry, args.port, args.addr) if args.port else None

    async def control() -> None:
        async with redis_client(url, cluster=runtime.settings.redis_cluster) as client:
            services = services_for(client, runtime.settings)
            lease = RedisLease(
                client, services.keys.rollout_lease, owner, int(args.lease_ttl * 1000)
            )
            ops = RolloutOps(services, runtime.config, f"controller:{owner}")
            controller = RolloutController(
                ops, lease, interval_s=args.interval, metrics=metrics.rollout
            )
            stop = asyncio.Event()
            with on_stop(asyncio.get_running_loop(), stop.set, stop.set):
                await controller.run(stop)

    try:
        run(control())
    finally:
        if server is not None:
            stop_server(server)
    return 0
