"""Turning request bodies into Tasks, and orchestrator refusals into problems."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from deepagents.contract.task import Task, utcnow
from deepagents.errors import (
    DeadlinePassed,
    DeepAgentsError,
    ErrorCode,
    IdempotencyConflict,
    InvalidPayload,
    NotBeforeTooFar,
    Overloaded,
    PayloadTooLarge,
    SubmitError,
    UnknownIntent,
)
from deepagents.gateway.problems import FieldError, Problem
from deepagents.gateway.schemas import SubmitRequest
from deepagents.orchestrator import Orchestrator

M = TypeVar("M", bound=BaseModel)
_FAR_S = 100 * 365 * 86_400.0  # further than any horizon (DEEPAGENTS_MAX_SCHEDULE_AHEAD_S)

_SUBMIT_CODES: tuple[tuple[type[SubmitError], ErrorCode], ...] = (
    (UnknownIntent, ErrorCode.UNKNOWN_INTENT),
    (InvalidPayload, ErrorCode.INVALID_PAYLOAD),
    (PayloadTooLarge, ErrorCode.PAYLOAD_TOO_LARGE),
    (DeadlinePassed, ErrorCode.DEADLINE_PASSED),
    (IdempotencyConflict, ErrorCode.IDEMPOTENCY_CONFLICT),
    (NotBeforeTooFar, ErrorCode.NOT_BEFORE_TOO_FAR),
)


def validate_body(model: type[M], value: Any) -> M:
    if not isinstance(value, dict):
        raise Problem(
            ErrorCode.VALIDATION_ERROR, f"the body must be a JSON object, not {_json_type(value)}"
        )
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        errors = [FieldError(field=_loc(e["loc"]), message=_message(e)) for e in exc.errors()[:20]]
        first = errors[0]
        raise Problem(
            ErrorCode.VALIDATION_ERROR, f"{first.field}: {first.message}", errors=errors
        ) from None


def _json_type(value: Any) -> str:
    names = {
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }
    return names.get(type(value), type(value).__name__)


def _loc(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) or "body"


def _message(error: Any) -> str:
    if error["type"] == "extra_forbidden" and error["loc"][-1:] == ("tenant",):
        return "not allowed: the tenant comes from your API key"
    if error["type"] == "extra_forbidden":
        return "unknown field; remove it (see the API's schema for the fields)"
    return str(error["msg"])


def build_tasks(
    requests: list[SubmitRequest], tenant: str, orchestrator: Orchestrator, *, batch: bool
) -> list[Task]:
    """Tasks for the orchestrator; unknown intents and past deadlines are named per field."""
    now = utcnow()
    errors: list[FieldError] = []
    where = "tasks.{}." if batch else ""
    for i, req in enumerate(requests):
        if req.intent not in orchestrator.router.by_intent:
            known = orchestrator.router.known_intents()
            errors.append(
                FieldError(
                    field=where.format(i) + "intent",
                    message=f"no agent serves {req.intent!r} (known: {known})",
                )
            )
        if req.deadline is not None and req.deadline <= now:
            errors.append(
                FieldError(
                    field=where.format(i) + "deadline",
                    message=f"{req.deadline.isoformat()} is in the past; "
                    "send a future time or none",
                )
            )
        if req.delay_s is not None and req.not_before is not None:
            errors.append(
                FieldError(
                    field=where.format(i) + "delay_s",
                    message="send not_before or delay_s, not both",
                )
            )
    if errors:
        raise Problem(_code_of(errors[0]), f"{errors[0].field}: {errors[0].message}", errors=errors)
    return [_task(req, tenant, now) for req in requests]


def _code_of(error: FieldError) -> ErrorCode:
    if error.field.endswith("intent"):
        return ErrorCode.UNKNOWN_INTENT
    if error.field.endswith("deadline"):
        return ErrorCode.DEADLINE_PASSED
    return ErrorCode.VALIDATION_ERROR


def _task(req: SubmitRequest, tenant: str, now: datetime) -> Task:
    fields = req.model_dump(exclude_none=True, exclude={"delay_s"})
    if req.delay_s is not None:
        # A delay past any date (1e300 s) is refused as too far, not as an overflow.
        fields["not_before"] = now + timedelta(seconds=min(req.delay_s, _FAR_S))
    if req.fairness_key is not None:
        # Under the tenant's name: a tenant's keys never join another tenant's queue.
        fields["fairness_key"] = f"{tenant}/{req.fairness_key}"
    return Task(**fields, tenant=tenant)


def submit_problem(exc: DeepAgentsError, accepted: list[str] | None = None) -> Problem:
    if isinstance(exc, Overloaded):
        detail = f"{exc}; back off for Retry-After seconds"
        if accepted:
            detail += f". Accepted before the refusal (do not resend): {', '.join(accepted)}"
        return Problem(ErrorCode.OVERLOADED, detail, retry_after_s=exc.retry_after_s)
    for cls, code in _SUBMIT_CODES:
        if isinstance(exc, cls):
            return Problem(code, str(exc))
    if isinstance(exc, SubmitError):
        return Problem(ErrorCode.VALIDATION_ERROR, str(exc))
    return Problem(ErrorCode.UNAVAILABLE, f"{exc.code}: {exc}; retry shortly", retry_after_s=1)
