"""Wire format of stream entries: JSON (orjson), validated at the edges. Never pickle.

An entry has the fields ``task`` (the Task as JSON), ``attempt`` (1-based),
``enq`` (enqueue time, ms since the epoch) and ``reply`` (a channel to notify, or empty).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, NamedTuple

import orjson
from pydantic import TypeAdapter, ValidationError

from deepagents.contract.result import Result
from deepagents.contract.task import TASK_ID_PATTERN, Task
from deepagents.errors import DeepAgentsError, ErrorCode

_TASK_ID = re.compile(TASK_ID_PATTERN.strip("^$"))
# A batch of tasks in one validation call (``decode_envelopes``).
_TASKS = TypeAdapter(list[Task])


class DecodeError(DeepAgentsError, ValueError):
    """A stream entry that is not a valid task envelope."""

    code = ErrorCode.DECODE_ERROR


class Envelope(NamedTuple):  # one per delivery: a tuple builds faster than a frozen dataclass
    task: Task
    attempt: int
    enqueued_ms: int
    reply: str = ""


def encode_task(task: Task) -> bytes:
    return orjson.dumps(task.model_dump(mode="json", exclude_none=True))


def _field(fields: dict[Any, Any], name: str) -> Any:
    value = fields.get(name.encode(), fields.get(name))
    if value is None:
        raise DecodeError(f"missing field {name!r}")
    return value


def decode_envelope(fields: dict[Any, Any] | None) -> Envelope:
    """Decode a stream entry; raise DecodeError with the reason for anything malformed."""
    if not fields:
        raise DecodeError("entry has no fields")
    try:
        # Entries read from Redis have bytes keys: look those up first (this is per task).
        raw = fields.get(b"task")
        if raw is None:
            raw = _field(fields, "task")
        task = Task.model_validate(orjson.loads(raw))
    except DecodeError:
        raise
    except (orjson.JSONDecodeError, ValidationError, ValueError, TypeError) as exc:
        raise DecodeError(f"{type(exc).__name__}: {_short(exc)}") from exc
    return _envelope(fields, task)


def decode_envelopes(batch: Sequence[dict[Any, Any] | None]) -> list[Envelope | DecodeError]:
    """``decode_envelope`` for a batch of entries, in their order: each an Envelope or the
    DecodeError it raised. The tasks are validated in one call, which saves pydantic's
    per-call cost per task; when anything in the batch is amiss, each entry is decoded
    on its own so that every error names its own entry."""
    try:
        tasks = _TASKS.validate_python([orjson.loads(fields[b"task"]) for fields in batch])  # type: ignore[index]
        return [_envelope(fields, task) for fields, task in zip(batch, tasks, strict=True)]  # type: ignore[arg-type]
    except Exception:  # sorted out entry by entry below
        return [_decode_or_error(fields) for fields in batch]


def _decode_or_error(fields: dict[Any, Any] | None) -> Envelope | DecodeError:
    try:
        return decode_envelope(fields)
    except DecodeError as exc:
        return exc


def _envelope(fields: dict[Any, Any], task: Task) -> Envelope:
    """The envelope's other fields, around its validated task."""
    try:
        try:  # as read from Redis: bytes keys (this is per task)
            attempt, enqueued = int(fields[b"attempt"]), int(fields[b"enq"])
            reply = fields.get(b"reply", b"")
        except KeyError:  # str keys, or a field missing
            attempt, enqueued = int(_field(fields, "attempt")), int(_field(fields, "enq"))
            reply = fields.get(b"reply", fields.get("reply", b""))
    except DecodeError:
        raise
    except (ValueError, TypeError) as exc:
        raise DecodeError(f"{type(exc).__name__}: {_short(exc)}") from exc
    if attempt < 1:
        raise DecodeError("attempt must be >= 1")
    reply_s = reply.decode() if isinstance(reply, bytes) else str(reply)
    return tuple.__new__(Envelope, (task, attempt, enqueued, reply_s))  # see transport/base.py


def salvage_ids(fields: dict[Any, Any] | None) -> tuple[str, str] | None:
    """The task id and reply channel of an entry that did not decode, when its task is
    still JSON with a well-formed ``task_id`` (a producer on another schema version, say):
    enough to answer its submitter. None when nothing can be trusted."""
    if not fields:
        return None
    try:
        task = orjson.loads(fields.get(b"task", fields.get("task", b"")))
        reply = fields.get(b"reply", fields.get("reply", b""))
        reply_s = reply.decode() if isinstance(reply, bytes) else str(reply)
    except (orjson.JSONDecodeError, UnicodeDecodeError, TypeError):
        return None
    task_id = task.get("task_id") if isinstance(task, dict) else None
    if not isinstance(task_id, str) or not _TASK_ID.fullmatch(task_id) or len(task_id) > 64:
        return None
    return task_id, reply_s


def encode_result(result: Result) -> bytes:
    return result.model_dump_json(exclude_none=True).encode()


def decode_result(raw: bytes | str) -> Result:
    return Result.model_validate(orjson.loads(raw))


def _short(exc: Exception, limit: int = 300) -> str:
    text = str(exc).replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "…"
