"""``deepagents agent-check URL``: check a remote agent service against the wire protocol."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

import orjson

from deepagents.errors import ConfigError
from deepagents.remote.check import RULES, check


def register(sub: Any) -> None:
    p = sub.add_parser(
        "agent-check",
        help="check a remote agent service against the protocol (docs/remote-agents.md)",
    )
    p.add_argument(
        "url",
        metavar="URL",
        help="the service's base URL, e.g. http://127.0.0.1:8787 (or grpc://127.0.0.1:50051)",
    )
    p.add_argument("--intent", default="risk_check", help="intent of the sample task")
    p.add_argument(
        "--payload",
        default="{}",
        metavar="JSON",
        help="payload of the sample task: one the service accepts",
    )
    p.add_argument("--timeout", type=float, default=10.0, metavar="S", help="per request")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if not args.url.startswith(("http://", "https://", "grpc://", "grpcs://")):
        raise ConfigError(f"agent-check: {args.url!r} is not an http(s) or grpc(s) URL")
    try:
        payload = orjson.loads(args.payload)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"agent-check: --payload is not JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise ConfigError("agent-check: --payload must be a JSON object")
    # httpx logs each request at INFO: a dozen lines that would bury the verdicts.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    verdicts = check(args.url, args.intent, payload, args.timeout)
    for v in verdicts:
        sys.stdout.write(f"{'ok  ' if v.ok else 'FAIL'} {v.rule:<16} {v.detail}\n")
    failed = [v.rule for v in verdicts if not v.ok]
    if failed:
        sys.stderr.write(f"deepagents: agent-check: broken rule(s): {', '.join(failed)}\n")
        return 1
    sys.stdout.write(f"all {len(RULES)} rules hold\n")
    return 0
