"""``deepagents worker MODULE:CLASS``: run a worker for one agent type."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import socket
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from deepagents import compose
from deepagents._internal.extras import require_extra
from deepagents._internal.heap import freeze_startup_heap
from deepagents.cli.common import (
    load_runtime,
    redis_client,
    report,
    require_redis_url,
    run,
)
from deepagents.cli.signals import on_stop
from deepagents.cli.supervisor import Fork, Supervisor
from deepagents.config import FileConfig, Settings
from deepagents.config.placement import Placement, parse_placement
from deepagents.contract.agent import AgentContract
from deepagents.contract.loading import load_agent_class
from deepagents.errors import ConfigError, DeepAgentsError
from deepagents.telemetry.core import Telemetry, configure
from deepagents.telemetry.serve import serve_metrics, stop_server
from deepagents.worker import Assignment, Upstream, Worker
from deepagents.worker.probes import WorkerProbes

if TYPE_CHECKING:
    from collections.abc import Callable

    from deepagents.contract import Result, Task
    from deepagents.orchestrator import Orchestrator
    from deepagents.remote import RemoteAgent
    from deepagents.transport.base import ChildEnded

log = logging.getLogger("deepagents.cli")
ORPHAN_CHECK_S = 1.0  # how often a forked worker checks that its supervisor still runs
FIRST_TASK_WATCH_S = 5.0  # a forked worker logs its first task if done within this


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
    p.add_argument(
        "--processes",
        type=_processes,
        metavar="N",
        help="run N worker processes forked from one supervisor, which replaces a dead one "
        "at once; each has its own consumer (CONSUMER-SLOT, default host-pid-SLOT) and "
        "serves /metrics on PORT+SLOT (default: one process, no supervisor)",
    )
    p.set_defaults(func=main)


def _processes(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 256:
        raise argparse.ArgumentTypeError(f"{text!r} must be a number of processes, 1 to 256")
    return int(text)


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


@dataclass(frozen=True, slots=True)
class Plan:
    """All a worker process needs, read and checked before any process starts."""

    args: argparse.Namespace
    config: FileConfig
    settings: Settings
    agent: type[AgentContract]
    concurrency: dict[str, int]
    placement: Placement
    url: str


def main(args: argparse.Namespace) -> int:
    plan = _plan(args)
    if args.processes is None:
        return serve_process(plan)
    _preload(plan)
    freeze_startup_heap()  # before the forks: the children share these pages, untouched
    return Supervisor(args.processes, lambda fork: _serve_child(plan, fork)).run()


def _serve_child(plan: Plan, fork: Fork) -> int:
    """A forked worker; its error is one line, as ``deepagents`` reports any."""
    try:
        return serve_process(_child_plan(plan, fork), fork)
    except DeepAgentsError as exc:
        return report(exc)


def _plan(args: argparse.Namespace) -> Plan:
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
    if settings.otlp_endpoint:  # said once, before any process starts
        require_extra("otlp", "DEEPAGENTS_OTLP_ENDPOINT")
    if args.metrics_port is not None:
        settings = settings.model_copy(update={"metrics_port": args.metrics_port})
    if args.metrics_host is not None:
        settings = settings.model_copy(update={"metrics_host": args.metrics_host})
    return Plan(args, runtime.config, settings, cls, concurrency, placement, url)


def _preload(plan: Plan) -> None:
    """Import now what a worker imports only as it starts, so no forked child pays for it."""
    modules = ["uvloop"]
    if plan.args.with_audit_writer:
        modules.append("deepagents.store.audit.writer")
    if plan.settings.otlp_endpoint:
        modules.append("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            continue  # absent (uvloop off Linux, a missing extra): the child reports it
    compose.preload(plan.url, cluster=plan.settings.redis_cluster)
    if plan.config.models or plan.settings.sim_model_url:
        from deepagents.modelcall.calls import preload

        preload()


def _warn_unconfigured(plan: Plan) -> None:
    """An agent class the config does not name runs, but with the default settings, and no
    orchestrator reading that config routes a task to it: most likely a typo or the wrong
    config file, so it is said at start rather than found out from tasks that never run."""
    name = plan.agent.name
    if name in plan.config.agents:
        return
    log.warning(
        "agent %r (%s.%s) has no entry under agents: in the config: it runs with the "
        "default settings, and orchestrators that read this config route no task to it",
        name,
        plan.agent.__module__,
        plan.agent.__qualname__,
        extra={"action": "agent_not_configured", "agent": name},
    )


def _child_plan(plan: Plan, fork: Fork) -> Plan:
    """A forked worker's own consumer name (its slot's: a replacement re-reads at once what
    the dead one left pending) and its own /metrics port."""
    base = plan.settings.consumer or f"{socket.gethostname()}-{fork.supervisor}"
    update: dict[str, Any] = {"consumer": f"{base}-{fork.slot}"}
    if plan.settings.metrics_port is not None:
        update["metrics_port"] = plan.settings.metrics_port + fork.slot
    return Plan(
        plan.args,
        plan.config,
        plan.settings.model_copy(update=update),
        plan.agent,
        plan.concurrency,
        plan.placement,
        plan.url,
    )


def serve_process(plan: Plan, fork: Fork | None = None) -> int:
    """Run one worker in this process until it is stopped; ``fork`` when forked by the
    supervisor."""
    args, settings, cls = plan.args, plan.settings, plan.agent
    telemetry = configure(settings, service=f"deepagents-worker-{cls.name}")
    if fork is None or fork.slot == 0:  # said once, not by every forked child
        _warn_unconfigured(plan)
    probes = WorkerProbes()
    server = serve_metrics(telemetry, settings.metrics_port, settings.metrics_host, probes.probes())

    async def serve() -> None:
        readers = len(plan.placement.tiers) * len(plan.placement.shards)
        async with redis_client(
            plan.url,
            max_connections=readers + 32,
            cluster=settings.redis_cluster,
            block_ms=plan.config.agent_settings(cls.name).block_ms,
        ) as client:
            agent = await _new_agent(cls, client, settings.prefix)
            # Unanswered questions with on_timeout="escalate" are submitted through it, and
            # child tasks (ctx.delegate), whose ends it carries to their parents.
            escalations = _Submitting(
                lambda: _orchestrator(client, plan.config, settings, telemetry)
            )
            worker = Worker.from_client(
                agent,
                client=client,
                config=plan.config,
                settings=settings,
                telemetry=telemetry,
                assignment=Assignment(plan.placement, plan.concurrency),
                upstream=Upstream(escalations.submit, escalations),
            )
            probes.worker = worker
            task = asyncio.ensure_future(worker.run())
            writer = (
                _audit_writer(client, plan.config, settings) if args.with_audit_writer else None
            )
            drain = asyncio.ensure_future(writer.run()) if writer is not None else None
            watch = asyncio.ensure_future(_forked(worker, fork)) if fork is not None else None

            def stop() -> None:
                worker.stop()
                if writer is not None:
                    writer.stop()

            with on_stop(asyncio.get_running_loop(), stop, lambda: _cancel(task)):
                try:
                    await task
                finally:
                    if watch is not None:
                        watch.cancel()
                    if writer is not None and drain is not None:
                        writer.stop()  # it acks only what PostgreSQL committed; the rest waits
                        await drain
                    if _remote_class(cls) is not None:
                        # its connections, and the breaker outcomes it has not sent yet
                        await cast("RemoteAgent", agent).aclose()

    if fork is None:
        freeze_startup_heap()
    try:
        run(serve())
    finally:
        telemetry.tracing.shutdown()  # flush spans still batched for the exporter
        if server is not None:
            stop_server(server)
    return 0


def _orchestrator(
    client: compose.RedisClient, config: FileConfig, settings: Settings, telemetry: Telemetry
) -> Orchestrator:
    from deepagents.orchestrator import Orchestrator

    return Orchestrator.from_client(client, config=config, settings=settings, telemetry=telemetry)


class _Submitting:
    """The worker's orchestrator, built when the agent first submits through it (a child
    task, an escalation): a worker whose agent never does starts without the orchestrator's
    modules, some 30 ms of its start."""

    def __init__(self, build: Callable[[], Orchestrator]) -> None:
        self._build = build
        self._orchestrator: Orchestrator | None = None

    def _get(self) -> Orchestrator:
        if self._orchestrator is None:
            self._orchestrator = self._build()
        return self._orchestrator

    async def submit(self, task: Task) -> str:
        return (await self._get().submit(task)).task_id

    async def submit_child(self, child: Task) -> None:
        await self._get().submit_child(child)

    async def child_result(self, task_id: str) -> Result | None:
        return await self._get().child_result(task_id)

    async def child_ended(self, parent_id: str, child_id: str, result_json: bytes) -> ChildEnded:
        return await self._get().child_ended(parent_id, child_id, result_json)


async def _forked(worker: Worker, fork: Fork) -> None:
    """A forked worker's log of its start (from the fork to ready, and to its first task
    done if one comes within FIRST_TASK_WATCH_S), and its end when the supervisor is gone
    (killed with -9: nobody would stop this process then)."""
    await worker.ready.wait()
    where = {"slot": fork.slot, "pid": os.getpid(), "consumer": worker.consumer}
    log.info(
        "worker process ready",
        extra={"action": "child_ready", **where, "ready_ms": _ms(fork)},
    )
    # Polled for a few seconds only, rather than an event on the worker's commit path.
    watch_until = time.monotonic() + FIRST_TASK_WATCH_S
    while not worker.stats.committed and time.monotonic() < watch_until:  # noqa: ASYNC110
        await asyncio.sleep(0.001)
    if worker.stats.committed:
        log.info(
            "worker process ran its first task",
            extra={"action": "child_first_task", **where, "first_task_ms": _ms(fork)},
        )
    # Linux would signal a parent's death (PR_SET_PDEATHSIG), other systems not: polled.
    while os.getppid() == fork.supervisor:  # noqa: ASYNC110
        await asyncio.sleep(ORPHAN_CHECK_S)
    log.warning("worker supervisor is gone: stopping", extra={"action": "orphaned", **where})
    worker.stop()


def _ms(fork: Fork) -> float:
    return round(fork.since_fork_ms(), 1)


def _agent_class(args: argparse.Namespace, config: FileConfig) -> type[AgentContract]:
    if (args.agent is None) == (args.remote is None):
        raise ConfigError("worker: give either MODULE:CLASS or --remote NAME")
    if args.agent is not None:
        return load_agent_class(args.agent)
    entry = config.agents.get(args.remote)
    if entry is None or entry.remote is None:
        raise ConfigError(f"--remote {args.remote}: no agents.{args.remote}.remote in the config")
    from deepagents.remote import remote_agent_class  # aiohttp: only for a remote agent

    return remote_agent_class(args.remote, entry)


async def _new_agent(cls: type[AgentContract], client: Any, prefix: str) -> AgentContract:
    """The agent; a remote one with the fleet's circuit breaker (shared through Redis), and
    the version its service reports, learnt before the worker registers it."""
    remote = _remote_class(cls)
    if remote is None:
        return cls()
    agent = remote(redis=client, prefix=prefix)
    await agent.introduce()
    return agent


def _remote_class(cls: type[AgentContract]) -> type[RemoteAgent] | None:
    """``cls`` as a remote agent's class, or None. A class can derive from ``RemoteAgent``
    only once its module is loaded, so it is not imported (nor aiohttp) to find out."""
    module = sys.modules.get("deepagents.remote.agent")
    if module is not None and issubclass(cls, module.RemoteAgent):
        return cast("type[RemoteAgent]", cls)
    return None


def _audit_writer(client: Any, config: Any, settings: Any) -> Any:
    from deepagents.store.audit.writer import AuditWriter

    return AuditWriter(client, settings=settings, config=config)


def _cancel(task: asyncio.Future[None]) -> None:
    task.cancel()
