"""``deepagents publish --intent I --payload JSON [--wait S] [--not-before T | --delay S]``:
submit one task, to run now or later."""

from __future__ import annotations

import argparse
import math
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from deepagents.cli.common import load_runtime, redis_client, require_redis_url, run
from deepagents.contract.codec import encode_result
from deepagents.errors import ConfigError, InvalidPayload, ResultTimeout
from deepagents.orchestrator import Orchestrator


def register(sub: Any) -> None:
    p = sub.add_parser("publish", help="submit one task")
    p.add_argument("--intent", required=True, help="what the task asks for; routes it to an agent")
    p.add_argument("--payload", default="{}", help="a JSON object")
    p.add_argument("--tenant", help="the tenant the task belongs to")
    p.add_argument(
        "--priority",
        type=int,
        help="tier hint 0-9: 0 is the first tier (p0), past the last the last",
    )
    p.add_argument(
        "--idempotency-key", help="a repeat with this key returns the first task, not a new one"
    )
    p.add_argument(
        "--fairness-key",
        help="in a tier with fair_share: the queue the task shares it through (default: tenant)",
    )
    p.add_argument(
        "--fairness-weight",
        type=float,
        metavar="WEIGHT",
        help="in a tier with fair_share: that queue's weight (default 1)",
    )
    when = p.add_mutually_exclusive_group()
    when.add_argument(
        "--not-before",
        metavar="TIME",
        help="run no earlier than this (ISO 8601 with a zone, e.g. 2030-01-01T09:00:00Z)",
    )
    when.add_argument(
        "--delay", type=float, metavar="SECONDS", help="run no earlier than this from now"
    )
    p.add_argument(
        "--wait", type=float, metavar="SECONDS", help="wait for the result, print it as JSON"
    )
    p.set_defaults(func=main)


def parse_payload(text: str) -> dict[str, Any]:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidPayload(f"--payload is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise InvalidPayload(f"--payload must be a JSON object, not {type(value).__name__}")
    return value


def parse_not_before(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(
            f"--not-before {text!r} is not an ISO 8601 time (e.g. 2030-01-01T09:00:00Z)"
        ) from None
    if value.tzinfo is None:
        raise ConfigError(f"--not-before {text!r} has no zone; add one (Z, +02:00)")
    return value


def _when(args: argparse.Namespace) -> datetime | None:
    if args.not_before is not None:
        return parse_not_before(args.not_before)
    if args.delay is None:
        return None
    if not (args.delay > 0 and math.isfinite(args.delay)):
        raise ConfigError(f"--delay must be a positive number of seconds, not {args.delay:g}")
    try:
        return datetime.now(UTC) + timedelta(seconds=args.delay)
    except OverflowError:
        raise ConfigError(f"--delay {args.delay:g} s is past any date") from None


def main(args: argparse.Namespace) -> int:
    if args.wait is not None and not args.wait > 0:  # checked before anything is enqueued
        raise ConfigError(f"--wait must be a positive number of seconds, not {args.wait:g}")
    not_before = _when(args)
    runtime = load_runtime(args.config)
    payload = parse_payload(args.payload)
    url = require_redis_url(runtime.settings)
    task: dict[str, Any] = {"intent": args.intent, "payload": payload}
    if args.fairness_weight is not None and not (
        args.fairness_weight > 0 and math.isfinite(args.fairness_weight)
    ):
        raise ConfigError(
            f"--fairness-weight must be a positive number, not {args.fairness_weight:g}"
        )
    for field in ("tenant", "priority", "idempotency_key", "fairness_key", "fairness_weight"):
        if getattr(args, field) is not None:
            task[field] = getattr(args, field)
    if not_before is not None:
        task["not_before"] = not_before

    async def submit() -> int:
        async with (
            redis_client(url, cluster=runtime.settings.redis_cluster) as client,
            Orchestrator.from_client(
                client, config=runtime.config, settings=runtime.settings
            ) as orch,
        ):
            handle = await orch.submit(task)
            if args.wait is None:
                line = {
                    "task_id": handle.task_id,
                    "agent": handle.agent,
                    "tier": handle.tier,
                    "shard": handle.shard,
                    "duplicate": handle.duplicate,
                }
                if handle.warning:
                    line["warning"] = handle.warning
                sys.stdout.write(orjson.dumps(line).decode() + "\n")
                return 0
            try:
                result = await handle.result(timeout=args.wait)
            except ResultTimeout:
                # Why it has no result, when the reason is that nobody serves its agent.
                warning = await orch.unserved(handle.agent) or handle.warning
                if warning:
                    sys.stderr.write(f"deepagents: publish: {warning}\n")
                raise
            sys.stdout.write(encode_result(result).decode() + "\n")
            return 0 if result.status.value != "failed" else 3

    return run(submit())
