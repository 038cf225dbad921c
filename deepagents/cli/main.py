"""The ``deepagents`` command. The only place that exits the process or prints tracebacks.

Each subcommand lives in its own module exposing ``register(subparsers)``; the handler
it sets (``func``) takes the parsed arguments and returns the exit code.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from deepagents.errors import DeepAgentsError

COMMANDS = (
    "demo",
    "worker",
    "publish",
    "status",
    "dlq",
    "gateway",
    "db",
    "audit",
    "audit-writer",
    "sim-model",
)

EXIT_USAGE = 2
EXIT_ERROR = 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deepagents",
        description="Schedule work for AI agents over sharded, priority-tiered Redis Streams.",
    )
    parser.add_argument(
        "--config", help="YAML config file (default: $DEEPAGENTS_CONFIG or config/deepagents.yaml)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"deepagents.cli.{name.replace('-', '_')}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("asyncio").setLevel(logging.WARNING)
    try:
        return int(args.func(args) or 0)
    except DeepAgentsError as exc:
        print(f"deepagents: error: {exc}", file=sys.stderr)
        return EXIT_USAGE if exc.code == "config_error" else EXIT_ERROR
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
