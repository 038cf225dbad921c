"""Structured logs: one JSON object per line (trace id and task id from context variables),
or a readable line when attached to a terminal.

Only an allow-list of ``extra`` fields is written, each a scalar: a log call can never dump
a payload, a prompt or a credential by passing it as ``extra`` (messages themselves are
written by our code and name ids, never contents). Values whose key looks secret are masked.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import IO, Any

import orjson

from deepagents.telemetry.tracing import current_ids

# Set by the worker around each task (every task runs in its own asyncio task, so the
# value never leaks to another); read only when a line is written.
current_task_id: ContextVar[str | None] = ContextVar("deepagents_task_id", default=None)

SAFE_EXTRA = frozenset(
    {
        "action", "agent", "consumer", "tier", "shard", "stream", "model", "outcome",
        "attempt", "status", "entry", "reason", "code", "task_id", "tenant", "count",
        "elapsed_ms", "port", "queue_ms",
        # the worker supervisor's processes (cli/supervisor.py)
        "slot", "pid", "exit_code", "replacing", "lived_s", "delay_s", "ready_ms",
        "first_task_ms",
    }
)  # fmt: skip
SECRET_WORDS = ("secret", "token", "password", "api_key", "apikey", "authorization", "prompt")


def _scalar(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)[:200]


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in SAFE_EXTRA:
        if key in record.__dict__:
            value = record.__dict__[key]
            secret = any(w in key.lower() for w in SECRET_WORDS)
            out[key] = "***" if secret else _scalar(value)
    task_id = current_task_id.get()
    if task_id is not None and "task_id" not in out:
        out["task_id"] = task_id
    ids = current_ids()
    if ids is not None:
        out["trace_id"], out["span_id"] = ids
    return out


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(line).decode()


class HumanFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        ctx = _fields(record)
        tags = [f"{k}={ctx[k]}" for k in ("task_id", "trace_id") if k in ctx]
        return f"{text} [{' '.join(tags)}]" if tags else text


def configure_logging(
    level: str = "INFO",
    fmt: str = "auto",
    stream: IO[str] | None = None,
    debug_loggers: Sequence[str] = (),
) -> None:
    """Replace the root handlers: JSON lines unless ``fmt`` is human (or auto on a TTY).

    ``level`` is deepagents' own; other libraries log at INFO at most, since their DEBUG
    lines quote what they carry (redis-py writes whole replies, results included), unless
    named in ``debug_loggers`` while ``level`` is DEBUG."""
    stream = stream or sys.stderr
    human = fmt == "human" or (fmt == "auto" and stream.isatty())
    handler = logging.StreamHandler(stream)
    handler.setFormatter(HumanFormatter() if human else JsonFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    numeric = logging.getLevelNamesMapping()[level]
    root.setLevel(max(numeric, logging.INFO))
    # Below INFO only ours: at INFO and above it inherits the root's level, as before.
    logging.getLogger("deepagents").setLevel(numeric if numeric < logging.INFO else logging.NOTSET)
    logging.getLogger("asyncio").setLevel(logging.WARNING)
    # httpx logs every request at INFO: a line per model call, nothing a model-call
    # record does not already hold (naming it in debug_loggers still shows them).
    logging.getLogger("httpx").setLevel(logging.WARNING)
    for name in debug_loggers if numeric <= logging.DEBUG else ():
        logging.getLogger(name).setLevel(logging.DEBUG)
