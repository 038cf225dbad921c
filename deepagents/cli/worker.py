"""``deepagents worker MODULE:CLASS``: run a worker for one agent type."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from deepagents._internal.extras import require_extra
from deepagents._internal.heap import freeze_startup_heap
from deepagents.cli.common import (
    load_runtime,
    redis_client,
    require_redis_url,
    run,
)
from deepagents.cli.signals import on_stop
from deepagents.config.placement import parse_placement
from deepagents.config.schema import FileConfig
from deepagents.contract.agent import AgentContract
from deepagents.contract.loading import load_agent_class
from deepagents.errors import ConfigError
from deepagents.orchestrator import Orchestrator, submitter
from deepagents.remote import RemoteAgent, remote_agent_class
from deepagents.telemetry.core import configure
from deepagents.telemetry.serve import serve_metrics, stop_server
from deepagents.worker import Worker
from deepagents.worker.probes import WorkerProbes


def register(sub: Any) -> None:
    p = sub.add_parser("worker", help="run a worker for one agent type")
    p.add_argument(
        "agent",
        nargs="?",
        metavar="MODULE:CLASS",
        help="the agent class, e.g. agents.risk:RiskAgent",
    )
    p.add_argument(
        "--remote",
        metavar="NAME",
        help="serve agent type NAME over HTTP, as agents.NAME.remote in the config says "
        "(instead of MODULE:CLASS)",
    )
    p.add_argument(
        "--concurrency",
        default="",
        metavar="TIER=N,...",
        help="override tier pool sizes, e.g. p0=20,p1=50,p2=100",
    )
    p.add_argument(
        "--tiers",
        default="",
        metavar="TIER,...",
        help="read only these tiers, e.g. p0 for a dedicated urgent pool (default: all)",
    )
    p.add_argument(
        "--shards",
        default="",
        metavar="N,N-M,...",
        help="read only these shards, e.g. 0,1 or 2-3 for a worker per shard (default: all)",
    )
    p.add_argument(
        "--consumer",
        help="consumer name (default: host-pid); reuse it across restarts "
        "to re-read this consumer's pending entries at once",
    )
    p.add_argument(
        "--with-audit-writer",
        action="store_true",
        help="also drain the audit outbox into PostgreSQL (DEEPAGENTS_DATABASE_URL); "
        "turns the outbox on",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus /metrics on this port (default: $DEEPAGENTS_METRICS_PORT; "
        "unset: not served)",
    )
    p.add_argument(
        "--metrics-host",
        metavar="ADDR",
        help="address /metrics listens on (default: $DEEPAGENTS_METRICS_HOST, else "
        "127.0.0.1; 0.0.0.0 for a scraper on another host)",
    )
    p.set_defaults(func=main)


def parse_concurrency(text: str, tiers: tuple[str, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or name not in tiers or not value.isdigit() or int(value) < 1:
            raise ConfigError(
                f"--concurrency: {part!r} must be TIER=N with TIER in {', '.join(tiers)} and N >= 1"
            )
        out[name] = int(value)
    return out


def _require_mcp(config: FileConfig, agent: str) -> None:
    """An agent with MCP servers needs the mcp extra: said before anything starts."""
    entry = config.agents.get(agent)
    if entry is not None and entry.mcp_servers:
        require_extra("mcp", f"agents.{agent}.mcp_servers")


def main(args: argparse.Namespace) -> int:
    runtime = load_runtime(args.config)
    cls = _agent_class(args, runtime.config)
    concurrency = parse_concurrency(args.concurrency, runtime.config.tier_names)
    shards = runtime.config.agent_settings(cls.name).shards
    placement = parse_placement(args.tiers, args.shards, runtime.config.tier_names, shards)
    url = require_redis_url(runtime.settings)
    settings = runtime.settings
    if args.consumer:
        settings = settings.model_copy(update={"consumer": args.consumer})
    _require_mcp(runtime.config, cls.name)
    if args.with_audit_writer:
        require_extra("audit", "--with-audit-writer")
        if settings.database_url is None:
            raise ConfigError(
                "--with-audit-writer needs DEEPAGENTS_DATABASE_URL", file="environment"
            )
        settings = settings.model_copy(update={"outbox": True})
    if args.metrics_port is not None:
        settings = settings.model_copy(update={"metrics_port": args.metrics_port})
    if args.metrics_host is not None:
        settings = settings.model_copy(update={"metrics_host": args.metrics_host})
    telemetry = configure(settings, service=f"deepagents-worker-{cls.name}")
    probes = WorkerProbes()
    server = serve_metrics(telemetry, settings.metrics_port, settings.metrics_host, probes.probes())

    async def serve() -> None:
        readers = len(placement.tiers) * len(placement.shards)
        async with redis_client(
            url, max_connections=readers + 32, cluster=settings.redis_cluster
        ) as client:
            agent = await _new_agent(cls, client, settings.prefix)
            # Unanswered questions with on_timeout="escalate" are submitted through it.
            escalations = Orchestrator.from_client(
                client, config=runtime.config, settings=settings, telemetry=telemetry
            )
            worker = Worker.from_client(
                agent,
                client=client,
                config=runtime.config,
                settings=settings,
                concurrency=concurrency,
                telemetry=telemetry,
                placement=placement,
                escalate=submitter(escalations),
            )
            probes.worker = worker
            task = asyncio.ensure_future(worker.run())
            writer = (
                _audit_writer(client, runtime.config, settings) if args.with_audit_writer else None
            )
            drain = asyncio.ensure_future(writer.run()) if writer is not None else None

            def stop() -> None:
                worker.stop()
                if writer is not None:
                    writer.stop()

            with on_stop(asyncio.get_running_loop(), stop, lambda: _cancel(task)):
                try:
                    await task
                finally:
                    if writer is not None and drain is not None:
                        writer.stop()  # it acks only what PostgreSQL committed; the rest waits
                        await drain
                    if isinstance(agent, RemoteAgent):
                        # its connections, and the breaker outcomes it has not sent yet
                        await agent.aclose()

    freeze_startup_heap()
    try:
        run(serve())
    finally:
        telemetry.tracing.shutdown()  # flush spans still batched for the exporter
        if server is not None:
            stop_server(server)
    return 0


async def _new_agent(cls: type[AgentContract], client: Any, prefix: str) -> AgentContract:
    """The agent; a remote one with the fleet's circuit breaker (shared through Redis), and
    the version its service reports, learnt before the worker registers it."""
    if not issubclass(cls, RemoteAgent):
        return cls()
    agent = cls(redis=client, prefix=prefix)
    await agent.introduce()
    return agent


def _agent_class(args: argparse.Namespace, config: Any) -> type[AgentContract]:
    if (args.agent is None) == (args.remote is None):
        raise ConfigError("worker: give either MODULE:CLASS or --remote NAME")
    if args.agent is not None:
        return load_agent_class(args.agent)
    entry = config.agents.get(args.remote)
    if entry is None or entry.remote is None:
        raise ConfigError(f"--remote {args.remote}: no agents.{args.remote}.remote in the config")
    return remote_agent_class(args.remote, entry)


def _audit_writer(client: Any, config: Any, settings: Any) -> Any:
    from deepagents.store.audit.writer import AuditWriter

    return AuditWriter(client, settings=settings, config=config)


def _cancel(task: asyncio.Future[None]) -> None:
    task.cancel()
