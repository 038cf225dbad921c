"""What ``deepagents result`` and ``deepagents tasks show|watch`` share: checking a task id
given on the command line, and finding the task's records through an Orchestrator."""

from __future__ import annotations

import re
from typing import Any

from deepagents.errors import DeepAgentsError, ErrorCode, InvalidPayload
from deepagents.orchestrator import Orchestrator

# The gateway's pattern for a task id in a path (``routes_tasks.TaskId``).
_TASK_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class TaskNotFound(DeepAgentsError):
    """No record of the task: never submitted here, or its records expired."""

    code = ErrorCode.NOT_FOUND


def checked_task_id(text: str) -> str:
    if not _TASK_ID.fullmatch(text):
        shown = text if len(text) <= 80 else text[:80] + "…"
        raise InvalidPayload(
            f"{shown!r} is not a task id (1 to 64 letters, digits, '_', '.' or '-')"
        )
    return text


async def task_record(orch: Orchestrator, task_id: str) -> dict[str, Any]:
    """The task's hash (state, attempt, result, question…), or ``TaskNotFound``."""
    info = await orch.lookup(task_id)
    if info is None or not info.get("state"):
        raise TaskNotFound(
            f"no task {task_id} (unknown, or its records expired after "
            f"{orch.settings.result_ttl_s} s)"
        )
    return info
