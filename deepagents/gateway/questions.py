"""Views of the questions waiting tasks ask (``GET /v1/tasks/{id}``, ``GET /v1/waiting``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from deepagents.gateway.schemas import QuestionView, WaitingView
from deepagents.orchestrator.replies import question_of
from deepagents.transport.base import Waiting, now_ms


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _age_s(asked_ms: int) -> float:
    return round(max(0, now_ms() - asked_ms) / 1000, 3)


def question_view(info: dict[str, Any]) -> QuestionView | None:
    """The open question in a task hash's fields; None unless the task waits."""
    found = question_of(info)
    if found is None:
        return None
    return QuestionView(
        ask=found.ask,
        question=found.question,
        answer_schema=found.schema,
        asked_at=_at(found.asked_ms),
        age_s=_age_s(found.asked_ms),
        timeout_at=_at(found.due_ms),
        on_timeout=found.on_timeout,
    )


def waiting_view(waiting: Waiting) -> WaitingView:
    return WaitingView(
        task_id=waiting.task_id,
        agent=waiting.agent,
        ask=waiting.ask,
        question=waiting.question,
        asked_at=_at(waiting.asked_ms),
        age_s=_age_s(waiting.asked_ms),
        timeout_at=_at(waiting.due_ms),
        on_timeout=waiting.on_timeout,
    )
