"""The ``deepagents`` command. The only place that exits the process or prints tracebacks.

Each subcommand lives in its own module exposing ``register(subparsers)``; the handler
it sets (``func``) takes the parsed arguments and returns the exit code.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
from collections.abc import Sequence
from typing import Any

# Each command and its one-line help, for ``deepagents --help``. A command's module (its
# arguments and its imports) is loaded only when that command runs or asks for its help:
# the help of one command must not wait for every command's dependencies.
# tests/cli/test_startup_imports.py keeps these lines equal to the modules' own.
COMMANDS: dict[str, str] = {
    "demo": "run the whole system locally on a mixed workload",
    "worker": "run a worker for one agent type",
    "publish": "submit one task",
    "status": "per-stream backlog, pending, consumers, dead letters",
    "dlq": "inspect, replay or purge dead letters",
    "gateway": "serve the HTTP gateway (FastAPI on uvicorn)",
    "db": "manage the audit database (PostgreSQL)",
    "audit": "query the audit log (PostgreSQL)",
    "audit-writer": "drain the audit outbox streams into PostgreSQL",
    "sim-model": "run the model simulator (OpenAI and Anthropic APIs, loopback only; not a model)",
    "exporter": "serve fleet-level stream and health gauges sampled from Redis",
    "agent-check": "check a remote agent service against the protocol (docs/remote-agents.md)",
    "rollout": "show or change an agent's canary rollout",
    "rollout-controller": "promote or roll back canaries from their error rate and p95",
    "scheduler": "fire the config's recurring schedules (one leader per fleet)",
    "schedules": "list, pause, resume or trigger recurring schedules",
    "reply": "answer the question a waiting task asks",
    "tasks": "open questions (waiting); one task's record or events",
    "result": "a task's result by id, as JSON",
    "dev-redis": "run a throwaway local Redis until interrupted",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser, with the full arguments of ``command`` only (every command when None)."""
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
    for name, summary in COMMANDS.items():
        if command is None or name == command:
            command_module(name).register(sub)
        else:
            sub.add_parser(name, help=summary)
    return parser


def command_module(name: str) -> Any:
    return importlib.import_module(f"deepagents.cli.{name.replace('-', '_')}")


def chosen_command(argv: Sequence[str]) -> str:
    """The command ``argv`` names ("" when none): its first word that is not an option
    (``--config``'s value skipped). Errors are left to the full parser."""
    words = iter(argv)
    for word in words:
        if word == "--config":
            next(words, None)
        elif word in ("-h", "--help"):
            return ""
        elif not word.startswith("-"):
            return word if word in COMMANDS else ""
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    _without_httpx_cli()
    own_process = argv is None  # the console script or ``python -m deepagents``
    argv = sys.argv[1:] if argv is None else list(argv)
    # No collector passes while the command's modules load: imports allocate thousands of
    # long-lived objects (classes, schemas) and free almost none, so each pass walks them for
    # nothing: 2% of the instructions of `deepagents worker --help` (callgrind, paired; in
    # docs/benchmarks.md). Once they are loaded, they leave the collector's view (frozen, as
    # ``freeze_startup_heap`` does): else the first young pass after ``gc.enable`` walks all
    # of them, about 90,000 objects for a worker, to free about 1,300 (30 ms of its start).
    # Only in a process of its own: called with ``argv`` from a program (a test, say), the
    # freeze would keep that program's uncollected cycles for good. What the command itself
    # makes is collected as usual.
    gc.disable()
    hidden = _hide_otel_metrics_from_redis()
    try:
        args = build_parser(chosen_command(argv) or "").parse_args(argv)
        from deepagents.cli.common import report
        from deepagents.errors import DeepAgentsError
        from deepagents.telemetry.logs import configure_logging
    finally:
        if hidden and sys.modules.get(OTEL_METRICS_SDK, _ABSENT) is None:
            del sys.modules[OTEL_METRICS_SDK]
        if own_process:
            gc.freeze()
        gc.enable()

    # JSON lines unless stderr is a terminal (DEEPAGENTS_LOG_FORMAT overrides).
    fmt, debug_loggers = _log_settings()
    configure_logging("DEBUG" if args.verbose else "INFO", fmt, debug_loggers=debug_loggers)
    try:
        return int(args.func(args) or 0)
    except DeepAgentsError as exc:
        return report(exc)
    except KeyboardInterrupt:
        return 130


def _without_httpx_cli() -> None:
    """Keep httpx from importing its own command line (click, pygments, rich) in this
    process: about 70% of ``import httpx``, never used by deepagents. httpx falls back to a
    stub ``httpx.main`` when that import fails (its optional ``[cli]`` extra); the
    ``deepagents`` process never runs httpx's command line."""
    if "httpx" not in sys.modules:
        sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]


OTEL_METRICS_SDK = "opentelemetry.sdk.metrics"
_ABSENT = object()


def _hide_otel_metrics_from_redis() -> bool:
    """While the command's modules load, make redis-py 8 believe the OpenTelemetry metrics
    SDK is not installed: it imports the SDK at import time, when it is installed, for
    metrics of its own that stay off unless configured through ``redis.observability``,
    which deepagents never does (its metrics are Prometheus'). That import is about 86
    million instructions, about 4% of a worker's start (docs/benchmarks.md). The SDK is
    importable again as soon as the command's modules are loaded. Nothing is hidden when
    redis-py or the SDK were imported before (``main`` called in a process that has them)."""
    if "redis" in sys.modules or OTEL_METRICS_SDK in sys.modules:
        return False
    sys.modules[OTEL_METRICS_SDK] = None  # type: ignore[assignment]
    return True


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
