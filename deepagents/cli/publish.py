"""``deepagents publish --intent I --payload JSON [--wait S]``: submit one task."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from deepagents.cli.common import load_runtime, redis_client, require_redis_url, run
from deepagents.contract.codec import encode_result
from deepagents.errors import ConfigError, InvalidPayload
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


def main(args: argparse.Namespace) -> int:
    if args.wait is not None and not args.wait > 0:  # checked before anything is enqueued
        raise ConfigError(f"--wait must be a positive number of seconds, not {args.wait:g}")
    runtime = load_runtime(args.config)
    payload = parse_payload(args.payload)
    url = require_redis_url(runtime.settings)
    task: dict[str, Any] = {"intent": args.intent, "payload": payload}
    for field in ("tenant", "priority", "idempotency_key"):
        if getattr(args, field) is not None:
            task[field] = getattr(args, field)

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
                sys.stdout.write(orjson.dumps(line).decode() + "\n")
                return 0
            result = await handle.result(timeout=args.wait)
            sys.stdout.write(encode_result(result).decode() + "\n")
            return 0 if result.status.value != "failed" else 3

    return run(submit())
