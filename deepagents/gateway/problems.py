"""RFC 9457 problem details: every error the gateway answers, with a stable ``type`` per code.

Handlers raise ``Problem``; the app turns it into ``application/problem+json``. Each 4xx
says what to fix in ``detail`` and, for field errors, in ``errors``.
"""

from __future__ import annotations

import math
from typing import Any

import orjson
from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import Response

from deepagents.errors import DeepAgentsError, ErrorCode

PROBLEM_BASE = "urn:deepagents:problem:"
MEDIA_TYPE = "application/problem+json"

# code -> (HTTP status, title). The code is the stable part clients branch on.
CODES: dict[ErrorCode, tuple[int, str]] = {
    ErrorCode.EMPTY_BODY: (400, "The request body is empty"),
    ErrorCode.INVALID_JSON: (400, "The request body is not valid JSON"),
    ErrorCode.DUPLICATE_KEY: (400, "A JSON object repeats a key"),
    ErrorCode.NON_FINITE_NUMBER: (400, "NaN and Infinity are not JSON"),
    ErrorCode.NUMBER_TOO_LONG: (400, "A number has too many digits"),
    ErrorCode.NUMBER_OUT_OF_RANGE: (400, "An integer is outside the 64-bit range"),
    ErrorCode.NESTING_TOO_DEEP: (400, "The JSON is nested too deeply"),
    ErrorCode.TOO_MANY_KEYS: (400, "A JSON object has too many keys"),
    ErrorCode.BAD_STRING: (400, "A string is too long or holds characters that cannot be stored"),
    ErrorCode.UNAUTHORIZED: (401, "A valid API key is required"),
    ErrorCode.NOT_FOUND: (404, "No such resource"),
    ErrorCode.METHOD_NOT_ALLOWED: (405, "Method not allowed"),
    ErrorCode.REQUEST_TIMEOUT: (408, "The request arrived too slowly"),
    ErrorCode.TOO_LATE: (409, "The task has already started"),
    ErrorCode.IDEMPOTENCY_CONFLICT: (409, "The idempotency key belongs to a different task"),
    ErrorCode.NOT_WAITING: (409, "The task is not waiting for a reply"),
    ErrorCode.ALREADY_REPLIED: (409, "The question was answered already"),
    ErrorCode.BODY_TOO_LARGE: (413, "The request body is too large"),
    ErrorCode.PAYLOAD_TOO_LARGE: (413, "The encoded task is too large"),
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: (415, "The body must be application/json"),
    ErrorCode.HEADERS_TOO_LARGE: (431, "The request headers are too large"),
    ErrorCode.VALIDATION_ERROR: (422, "The request does not match the schema"),
    ErrorCode.UNKNOWN_INTENT: (422, "No agent serves this intent"),
    ErrorCode.INVALID_PAYLOAD: (422, "The payload does not match what the agent accepts"),
    ErrorCode.DEADLINE_PASSED: (422, "The deadline is already in the past"),
    ErrorCode.NOT_BEFORE_TOO_FAR: (422, "The task is scheduled too far ahead"),
    ErrorCode.BATCH_TOO_LARGE: (422, "The batch holds too many tasks"),
    ErrorCode.INVALID_REPLY: (422, "The answer does not match the question's schema"),
    ErrorCode.RATE_LIMITED: (429, "Too many requests for this tenant"),
    ErrorCode.TOO_MANY_IN_FLIGHT: (429, "Too many requests in flight for this tenant"),
    ErrorCode.DECODE_ERROR: (410, "The task's stored record is damaged"),
    ErrorCode.INTERNAL_ERROR: (500, "Internal error"),
    ErrorCode.OVERLOADED: (503, "The target queue is over its backlog limit"),
    ErrorCode.UNAVAILABLE: (503, "A dependency of the gateway is unavailable"),
    ErrorCode.DROPPED: (503, "The task waited too long in its queue and was dropped unrun"),
}


class FieldError(BaseModel):
    field: str = Field(description="where in the body, e.g. `tasks.0.deadline`")
    message: str


class ProblemDocument(BaseModel):
    """An RFC 9457 problem document, plus ``code`` and optional extension members."""

    type: str = Field(description=f"`{PROBLEM_BASE}<code>`, stable per code")
    title: str
    status: int
    detail: str = Field(description="what went wrong and what to change")
    instance: str | None = None
    code: str
    errors: list[FieldError] | None = None
    retry_after_s: float | None = None


class Problem(DeepAgentsError):
    """An error answered as a problem document (raised by handlers, never past the app)."""

    def __init__(
        self,
        code: ErrorCode,
        detail: str,
        *,
        errors: list[FieldError] | None = None,
        retry_after_s: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        if code not in CODES:
            raise ValueError(f"unknown problem code {code!r}")
        super().__init__(detail)
        self.code = code
        self.status, self.title = CODES[code]
        self.detail = detail
        self.errors = errors
        self.retry_after_s = retry_after_s
        self.headers = dict(headers or {})
        if retry_after_s is not None:
            # Retry-After is whole seconds; round up so a client never retries too early.
            self.headers["Retry-After"] = str(max(1, math.ceil(retry_after_s)))

    def document(self, instance: str | None = None) -> dict[str, Any]:
        doc = ProblemDocument(
            type=PROBLEM_BASE + self.code,
            title=self.title,
            status=self.status,
            detail=self.detail,
            instance=instance,
            code=self.code,
            errors=self.errors,
            retry_after_s=self.retry_after_s,
        )
        return doc.model_dump(exclude_none=True)


def problem_response(problem: Problem, request: Request | None = None) -> Response:
    instance = request.url.path if request is not None else None
    return Response(
        orjson.dumps(problem.document(instance)),
        status_code=problem.status,
        media_type=MEDIA_TYPE,
        headers=problem.headers,
    )


def responses_for(*codes: ErrorCode) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for these problem codes (grouped by status)."""
    out: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        status, _ = CODES[code]
        entry = out.setdefault(
            status,
            {
                "description": "",
                "content": {
                    MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/ProblemDocument"}}
                },
            },
        )
        entry["description"] = ", ".join(filter(None, [entry["description"], code]))
    return out
