"""``deepagents rollout status|start|set-weight|promote|rollback AGENT``: an agent's canary,
by hand (docs/rollouts.md). The state lives in Redis: orchestrators route by it within a
second, and the rollout controller works from it too."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import socket
from dataclasses import asdict
from typing import Any

import orjson
from rich.table import Table

from deepagents.cli.common import console as cli_console
from deepagents.cli.common import load_runtime, redis_client, require_redis_url, run
from deepagents.compose import services_for
from deepagents.errors import ConfigError
from deepagents.orchestrator.rollout_ops import RolloutOps
from deepagents.orchestrator.versions import REFRESH_S


def register(sub: Any) -> None:
    p = sub.add_parser("rollout", help="show or change an agent's canary rollout")
    rsub = p.add_subparsers(dest="rollout_command", required=True, metavar="ACTION")
    status = rsub.add_parser("status", help="versions, weights, live workers, queued work")
    start = rsub.add_parser("start", help="send a share of new tasks to a canary version")
    start.add_argument("--canary", required=True, help="the canary's version")
    start.add_argument("--weight", type=_weight, default=None, help="its share, 0..1")
    start.add_argument("--stable", help="the stable version (default: the current one)")
    weight = rsub.add_parser("set-weight", help="change the canary's share of new tasks")
    weight.add_argument("weight", type=_weight, help="0..1; 1 promotes the canary to stable")
    promote = rsub.add_parser("promote", help="to the next step (or --to); the last completes")
    promote.add_argument("--to", type=_weight, default=None, help="a weight, 0..1")
    rollback = rsub.add_parser("rollback", help="everything to stable; unstarted canary tasks move")
    rollback.add_argument("--reason", default="", help="recorded in the audit log")
    for parser in (status, start, weight, promote, rollback):
        parser.add_argument("agent", metavar="AGENT")
        parser.add_argument("--json", action="store_true")
    p.set_defaults(func=main)


def _weight(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number between 0 and 1") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1")
    return value


def actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"cli:{user}@{socket.gethostname()}"


def main(args: argparse.Namespace) -> int:
    runtime = load_runtime(args.config)
    url = require_redis_url(runtime.settings)
    if args.agent not in runtime.config.rollouts:
        known = ", ".join(sorted(runtime.config.rollouts)) or "none"
        raise ConfigError(
            f"agent {args.agent!r} has no rollouts.{args.agent} section in the configuration "
            f"(agents under a rollout: {known})"
        )

    async def act() -> dict[str, Any]:
        async with redis_client(url, cluster=runtime.settings.redis_cluster) as client:
            ops = RolloutOps(services_for(client, runtime.settings), runtime.config, actor())
            return await _act(ops, args)

    report = run(act())
    if args.json:
        print(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    else:
        _print(report)
    return 0


async def _act(ops: RolloutOps, args: argparse.Namespace) -> dict[str, Any]:
    agent, command = args.agent, args.rollout_command
    if command == "start":
        weight = args.weight if args.weight is not None else ops.rollout_config(agent).weight
        await ops.start(agent, args.canary, weight, args.stable)
    elif command == "set-weight":
        await ops.set_weight(agent, args.weight)
    elif command == "promote":
        await ops.promote(agent, args.to)
    elif command == "rollback":
        state = await ops.rollback(agent, reason=args.reason)
        # An orchestrator may still route on a snapshot up to REFRESH_S old: sweep again
        # once every one has seen the rollback (the controller keeps sweeping too).
        await asyncio.sleep(2 * REFRESH_S)
        await ops.sweep(state)
    state = await ops.state(agent)
    versions = await ops.versions(state)
    return {"rollout": asdict(state), "versions": [asdict(v) for v in versions]}


def _print(report: dict[str, Any]) -> None:
    state = report["rollout"]
    out = cli_console()
    canary = state["canary"] or "-"
    out.print(
        f"{state['agent']}: {state['phase']}; stable {state['stable']}, canary {canary} "
        f"at {state['weight']:.0%} (sticky by {state['sticky_by']}); last change by "
        f"{state['by']}: {state['reason']}"
    )
    table = Table("version", "live workers", "queued", "pending", "delayed")
    for v in report["versions"]:
        table.add_row(
            v["version"], str(v["live_workers"]), str(v["queued"]), str(v["pending"]),
            str(v["delayed"]),
        )  # fmt: skip
    out.print(table)
