"""Wire format of tasks and results: JSON (orjson), validated at the edges. Never pickle.

How a task sits in a stream entry (its fields) is the transport's business:
``transport/entries.py`` reads an entry into an ``Envelope``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import orjson
from pydantic import TypeAdapter, ValidationError

from deepagents.contract.result import Result
from deepagents.contract.task import Task
from deepagents.errors import DeepAgentsError, ErrorCode

# A batch of tasks in one validation call (``decode_tasks``).
_TASKS = TypeAdapter(list[Task])


class DecodeError(DeepAgentsError, ValueError):
    """A stream entry that is not a valid task envelope."""

    code = ErrorCode.DECODE_ERROR


class DamagedRecord(DecodeError):
    """A stored record that cannot be read back (a task's result, its location record,
    its question): damaged in Redis. ``record`` names which, for the metric."""

    def __init__(self, record: str, message: str) -> None:
        self.record = record
        super().__init__(message)


class TooLarge(DecodeError):
    """A stream entry whose task is over the size limit: never parsed."""

    code = ErrorCode.TOO_LARGE


class Envelope(NamedTuple):  # one per delivery: a tuple builds faster than a frozen dataclass
    task: Task
    attempt: int
    enqueued_ms: int
    reply: str = ""


def encode_task(task: Task) -> bytes:
    return orjson.dumps(task.model_dump(mode="json", exclude_none=True))


def encode_result(result: Result) -> bytes:
    return result.model_dump_json(exclude_none=True).encode()


def decode_result(raw: bytes | str) -> Result:
    """A stored Result; ``DamagedRecord`` when it is not one."""
    try:
        return Result.model_validate(orjson.loads(raw))
    except orjson.JSONDecodeError:
        raise DamagedRecord("result", "the stored result is damaged (not JSON)") from None
    except ValidationError as exc:
        raise DamagedRecord("result", f"the stored result is damaged ({where(exc)})") from None


def decode_tasks(raws: Sequence[bytes]) -> list[Task]:
    """Tasks' JSON validated in one call, which saves pydantic's per-call cost per task;
    raises on the first that is amiss (the caller then decodes them one by one)."""
    return _TASKS.validate_python([orjson.loads(raw) for raw in raws])


def where(exc: ValidationError, limit: int = 5) -> str:
    """Where validation failed and how, never with what: pydantic's own text quotes the
    input (``input_value={... 'password': ...}``), which then reaches logs, the dead-letter
    stream and the submitter."""
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    parts = [f"{'.'.join(map(str, e['loc'])) or 'task'}: {e['type']}" for e in errors[:limit]]
    more = f" (and {len(errors) - limit} more)" if len(errors) > limit else ""
    return "; ".join(parts) + more


def short(exc: Exception, limit: int = 300) -> str:
    text = str(exc).replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "…"
