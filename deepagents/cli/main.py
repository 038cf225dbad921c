"""The ``deepagents`` command. The only place that exits the process or prints tracebacks.

Each subcommand lives in its own module exposing ``register(subparsers)``; the handler
it sets (``func``) takes the parsed arguments and returns the exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from deepagents.cli.common import report
from deepagents.errors import DeepAgentsError
from deepagents.telemetry.logs import configure_logging

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
    "exporter",
    "agent-check",
    "rollout",
    "rollout-controller",
    "reply",
    "tasks",
    "result",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deepagents",
        description="Schedule work for AI agents over sharded, priority-tiered Redis Streams.",
    )
    parser.add_argument(
        "--config", help="YAML config file (default: $DEEPAGENTS_CONFIG or config/deepagents.yaml)"
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="log deepagents at DEBUG level (other libraries: $DEEPAGENTS_DEBUG_LOGGERS)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"deepagents.cli.{name.replace('-', '_')}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # JSON lines unless stderr is a terminal (DEEPAGENTS_LOG_FORMAT overrides).
    fmt, debug_loggers = _log_settings()
    configure_logging("DEBUG" if args.verbose else "INFO", fmt, debug_loggers=debug_loggers)
    try:
        return int(args.func(args) or 0)
    except DeepAgentsError as exc:
        return report(exc)
    except KeyboardInterrupt:
        return 130


def _log_settings() -> tuple[str, list[str]]:
    """The configured log format and debug loggers; a bad environment is reported by the
    command itself."""
    from deepagents.config import load_settings

    try:
        settings = load_settings()
    except Exception:
        return "auto", []
    return settings.log_format, [n for n in settings.debug_loggers.split(",") if n]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
