"""Views of the questions waiting tasks ask (``GET /v1/tasks/{id}``, ``GET /v1/waiting``)."""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime
from typing import Any

from deepagents.gateway.schemas import QuestionView, WaitingView
from deepagents.orchestrator.replies import question_of
from deepagents.transport.base import Waiting, WaitingCursor, now_ms


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


def encode_cursor(cursor: WaitingCursor) -> str:
    """The opaque token a listing's next (or previous) page starts after."""
    raw = f"{cursor.asked_ms}:{cursor.task_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(token: str) -> WaitingCursor:
    """``encode_cursor``'s token back; ValueError when it is not one."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ValueError("not a cursor this listing gave") from None
    asked, _, task_id = raw.partition(":")
    if not asked.isdigit() or not task_id or len(task_id) > 200:
        raise ValueError("not a cursor this listing gave")
    return WaitingCursor(int(asked), task_id)
