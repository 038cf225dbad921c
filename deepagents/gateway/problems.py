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

PROBLEM_BASE = "urn:deepagents:problem:"
MEDIA_TYPE = "application/problem+json"

# code -> (HTTP status, title). The code is the stable part clients branch on.
CODES: dict[str, tuple[int, str]] = {
    "empty_body": (400, "The request body is empty"),
    "invalid_json": (400, "The request body is not valid JSON"),
    "duplicate_key": (400, "A JSON object repeats a key"),
    "non_finite_number": (400, "NaN and Infinity are not JSON"),
    "number_too_long": (400, "A number has too many digits"),
    "number_out_of_range": (400, "An integer is outside the 64-bit range"),
    "nesting_too_deep": (400, "The JSON is nested too deeply"),
    "too_many_keys": (400, "A JSON object has too many keys"),
    "bad_string": (400, "A string is too long or holds characters that cannot be stored"),
    "unauthorized": (401, "A valid API key is required"),
    "not_found": (404, "No such resource"),
    "method_not_allowed": (405, "Method not allowed"),
    "request_timeout": (408, "The request arrived too slowly"),
    "too_late": (409, "The task has already started"),
    "idempotency_conflict": (409, "The idempotency key belongs to a different task"),
    "body_too_large": (413, "The request body is too large"),
    "payload_too_large": (413, "The encoded task is too large"),
    "unsupported_media_type": (415, "The body must be application/json"),
    "headers_too_large": (431, "The request headers are too large"),
    "validation_error": (422, "The request does not match the schema"),
    "unknown_intent": (422, "No agent serves this intent"),
    "invalid_payload": (422, "The payload does not match what the agent accepts"),
    "deadline_passed": (422, "The deadline is already in the past"),
    "batch_too_large": (422, "The batch holds too many tasks"),
    "rate_limited": (429, "Too many requests for this tenant"),
    "too_many_in_flight": (429, "Too many requests in flight for this tenant"),
    "internal_error": (500, "Internal error"),
    "overloaded": (503, "The target queue is over its backlog limit"),
    "unavailable": (503, "A dependency of the gateway is unavailable"),
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


class Problem(Exception):
    def __init__(
        self,
        code: str,
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


def responses_for(*codes: str) -> dict[int | str, dict[str, Any]]:
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
