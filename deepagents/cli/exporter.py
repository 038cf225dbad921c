"""``deepagents exporter``: the fleet's stream-level gauges, sampled from Redis, on /metrics.

One exporter per deployment: the backlog of a stream is a fact about Redis, not about a
worker, so exporting it from every worker would count it once per worker.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys

from prometheus_client import generate_latest

from deepagents.cli.common import load_runtime, redis_client, require_redis_url, run
from deepagents.cli.signals import on_stop
from deepagents.compose import services_for
from deepagents.errors import TransportError
from deepagents.orchestrator.fleet import FleetSampler
from deepagents.telemetry.metrics import FleetMetrics
from deepagents.telemetry.serve import serve_registry, stop_server

log = logging.getLogger("deepagents.exporter")


def register(sub: object) -> None:
    p = sub.add_parser(  # type: ignore[attr-defined]
        "exporter", help="serve fleet-level stream and health gauges sampled from Redis"
    )
    p.add_argument("--port", type=int, default=9464, help="port of /metrics (default 9464)")
    p.add_argument("--addr", default="0.0.0.0", help="address to bind (default 0.0.0.0)")  # noqa: S104
    p.add_argument(
        "--interval", type=float, default=5.0, help="seconds between samples (default 5)"
    )
    p.add_argument("--once", action="store_true", help="print one sample to stdout and exit")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    runtime = load_runtime(args.config)
    url = require_redis_url(runtime.settings)
    metrics = FleetMetrics()

    async def sample_forever() -> None:
        async with redis_client(url, cluster=runtime.settings.redis_cluster) as client:
            services = services_for(client, runtime.settings)
            sampler = FleetSampler(services, runtime.config, metrics)
            if args.once:
                await sampler.sample()
                return
            stop = asyncio.Event()
            with on_stop(asyncio.get_running_loop(), stop.set, stop.set):
                while not stop.is_set():
                    await _sample(sampler, metrics)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), args.interval)

    if args.once:
        run(sample_forever())
        sys.stdout.write(generate_latest(metrics.registry).decode())
        return 0
    server = serve_registry(metrics.registry, args.port, args.addr)
    try:
        run(sample_forever())
    finally:
        stop_server(server)
    return 0


async def _sample(sampler: FleetSampler, metrics: FleetMetrics) -> None:
    """A failed sample keeps the previous values and counts the error: Redis may be back
    at the next one, and the exporter must not flap."""
    try:
        await sampler.sample()
    except TransportError as exc:
        metrics.scrape_errors.inc()
        log.warning("sampling Redis failed: %s", exc, extra={"action": "sample_failed"})
