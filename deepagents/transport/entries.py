"""A task's stream entry: its fields, written by the enqueue, retry, reply and replay paths
(the Lua scripts and the memory bus alike) and read back here into an ``Envelope``.

An entry has the fields ``task`` (the Task as JSON), ``attempt`` (1-based), ``enq``
(enqueue time, ms since the epoch) and ``reply`` (a channel to notify, or empty).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import orjson
from pydantic import ValidationError

from deepagents.contract.codec import (
    DecodeError,
    Envelope,
    TooLarge,
    decode_tasks,
    short,
    where,
)
from deepagents.contract.task import TASK_ID_PATTERN, Task

Fields = dict[bytes, bytes]

_TASK_ID = re.compile(TASK_ID_PATTERN.strip("^$"))
# A task id as the encoder writes it, found in a task that no longer parses; without the
# key's opening quote, which damage to the JSON's first bytes takes with it.
_TASK_ID_MEMBER = re.compile(rb'task_id"\s*:\s*"(%s)"' % TASK_ID_PATTERN.strip("^$").encode())


def entry_fields(
    task_json: bytes, attempt: int | str, enqueued_ms: int | str, reply: str
) -> Fields:
    """The fields of a task's entry, as the scripts write them."""
    return {
        b"task": task_json,
        b"attempt": str(attempt).encode(),
        b"enq": str(enqueued_ms).encode(),
        b"reply": reply.encode(),
    }


def task_id_of(fields: Fields) -> str:
    """The entry's task id for its hash key; '-' for an entry that is not a task (it moves
    without one, and the target version's worker dead-letters it, as any worker would)."""
    try:
        task_id = orjson.loads(fields.get(b"task", b"{}")).get("task_id")
    except (orjson.JSONDecodeError, AttributeError):
        return "-"
    return task_id if isinstance(task_id, str) and task_id else "-"


def _field(fields: dict[Any, Any], name: str) -> Any:
    value = fields.get(name.encode(), fields.get(name))
    if value is None:
        raise DecodeError(f"missing field {name!r}")
    return value


def decode_envelope(fields: dict[Any, Any] | None, max_task_bytes: int | None = None) -> Envelope:
    """Decode a stream entry; raise DecodeError with the reason for anything malformed,
    TooLarge for a task over ``max_task_bytes``."""
    if not fields:
        raise DecodeError("entry has no fields")
    try:
        # Entries read from Redis have bytes keys: look those up first (this is per task).
        raw = fields.get(b"task")
        if raw is None:
            raw = _field(fields, "task")
        if max_task_bytes is not None and len(raw) > max_task_bytes:
            raise TooLarge(
                f"the task is {len(raw)} bytes, over the limit of {max_task_bytes} "
                "(DEEPAGENTS_MAX_PAYLOAD_BYTES)"
            )
        task = Task.model_validate(orjson.loads(raw))
    except DecodeError:
        raise
    except ValidationError as exc:
        raise DecodeError(f"ValidationError: {where(exc)}") from exc
    except (orjson.JSONDecodeError, ValueError, TypeError) as exc:
        raise DecodeError(f"{type(exc).__name__}: {short(exc)}") from exc
    return _envelope(fields, task)


def decode_envelopes(
    batch: Sequence[dict[Any, Any] | None], max_task_bytes: int | None = None
) -> list[Envelope | DecodeError]:
    """``decode_envelope`` for a batch of entries, in their order: each an Envelope or the
    DecodeError it raised. The tasks are validated in one call, which saves pydantic's
    per-call cost per task; when anything in the batch is amiss, each entry is decoded
    on its own so that every error names its own entry."""
    try:
        raws = [fields[b"task"] for fields in batch]  # type: ignore[index]
        if max_task_bytes is not None and max(map(len, raws)) > max_task_bytes:
            raise TooLarge  # which one: sorted out below, before anything is parsed
        tasks = decode_tasks(raws)
        return [_envelope(fields, task) for fields, task in zip(batch, tasks, strict=True)]  # type: ignore[arg-type]
    except Exception:  # sorted out entry by entry below
        return [_decode_or_error(fields, max_task_bytes) for fields in batch]


def _decode_or_error(
    fields: dict[Any, Any] | None, max_task_bytes: int | None
) -> Envelope | DecodeError:
    try:
        return decode_envelope(fields, max_task_bytes)
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
    except (ValueError, TypeError) as exc:  # its text would quote the value
        raise DecodeError(f"{type(exc).__name__}: attempt and enq must be integers") from exc
    if attempt < 1:
        raise DecodeError("attempt must be >= 1")
    reply_s = reply.decode() if isinstance(reply, bytes) else str(reply)
    return Envelope(task, attempt, enqueued, reply_s)


def salvage_ids(fields: dict[Any, Any] | None, *, parse: bool = True) -> tuple[str, str] | None:
    """The task id and reply channel of an entry that did not decode: enough to answer its
    submitter. From the task's ``task_id`` when it is still JSON (a producer on another
    schema version, say); when it is not (damaged, or too large to ``parse``), from the
    first ``task_id": "…"`` in its text, which the dead-letter script uses only if that
    task was enqueued with this very entry. None when nothing can be trusted."""
    if not fields:
        return None
    raw = fields.get(b"task", fields.get("task", b""))
    reply = fields.get(b"reply", fields.get("reply", b""))
    try:
        reply_s = reply.decode() if isinstance(reply, bytes) else str(reply)
        task = orjson.loads(raw) if parse else None
    except (UnicodeDecodeError, TypeError):
        return None
    except orjson.JSONDecodeError:
        task = None
    if isinstance(task, dict):
        task_id = task.get("task_id")
    else:
        found = _TASK_ID_MEMBER.search(raw) if isinstance(raw, bytes) and task is None else None
        task_id = found.group(1).decode() if found else None
    if not isinstance(task_id, str) or not _TASK_ID.fullmatch(task_id) or len(task_id) > 64:
        return None
    return task_id, reply_s
