"""The wire protocol's messages, version 1: the one source of ``docs/remote-agents.schema.json``
and of what the worker sends and accepts. ``docs/remote-agents.proto`` maps them one to one."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

PROTOCOL_VERSION: Literal[1] = 1
PREFIX = "/v1"
STEPS = ("can_handle", "prepare_context", "execute", "post_process")


class _Request(BaseModel):
    # A service must ignore fields it does not know: a minor version may add some.
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Response(BaseModel):
    # The worker ignores fields it does not know: a service may be newer than it.
    model_config = ConfigDict(extra="ignore", frozen=True)


class WireTask(_Request):
    id: str
    intent: str
    payload: dict[str, Any]
    tenant: str | None = None


class WireError(_Request):
    code: str = Field(min_length=1, max_length=64)
    message: str = ""


class WireResult(_Request):
    status: Literal["success", "partial", "failed"]
    output: Any = None
    error: WireError | None = None
    degraded: bool = False
    metrics: dict[str, float] = Field(default_factory=dict)


class StepRequest(_Request):
    """What every step's request carries."""

    protocol: Literal[1] = PROTOCOL_VERSION
    task: WireTask
    attempt: int = Field(ge=1, description="1, then +1 per retry; a redelivery keeps it")
    time_left_ms: int | None = Field(
        ge=0, description="until the task's deadline; null: no deadline. Answer sooner."
    )
    traceparent: str | None = Field(description="W3C trace context of the task")
    idempotency_key: str = Field(description="task id ':' attempt; a repeat may be dropped")


class ExecuteRequest(StepRequest):
    context: dict[str, Any] = Field(description="what prepare_context answered")


class PostProcessRequest(StepRequest):
    result: WireResult


class CanHandleResponse(_Response):
    can_handle: bool


class PrepareContextResponse(_Response):
    context: dict[str, Any]


class ExecuteResponse(_Response):
    result: WireResult


class PostProcessResponse(_Response):
    """Either a result replacing the one sent, or metrics to add to it."""

    result: WireResult | None = None
    metrics: dict[str, float] | None = None


Method = Literal["can_handle", "prepare_context", "execute", "post_process"]


class HealthResponse(_Response):
    status: Literal["ok", "unhealthy"]
    detail: str | None = None
    version: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$",
        description=(
            "The version of the agent the service runs: the worker labels the results, "
            'audit events and registry entry of its tasks with it (absent: "0").'
        ),
    )
    methods: list[Method] | None = Field(
        default=None,
        description=(
            "The contract methods the service implements (absent: all four). The worker "
            "calls no other: without can_handle it takes every task its intents route, "
            "without prepare_context it sends an empty context, without post_process it "
            "keeps execute's result. execute is called whatever the list says."
        ),
    )


class Problem(_Response):
    """The body of a 4xx or 5xx answer (RFC 7807); optional, read for its detail."""

    type: str = "about:blank"
    title: str | None = None
    status: int | None = None
    detail: str | None = None


REQUESTS: dict[str, type[StepRequest]] = {
    "can_handle": StepRequest,
    "prepare_context": StepRequest,
    "execute": ExecuteRequest,
    "post_process": PostProcessRequest,
}
RESPONSES: dict[str, type[_Response]] = {
    "can_handle": CanHandleResponse,
    "prepare_context": PrepareContextResponse,
    "execute": ExecuteResponse,
    "post_process": PostProcessResponse,
    "health": HealthResponse,
}


def json_schema() -> dict[str, Any]:
    """The protocol as one JSON Schema document: a definition per message."""
    defs: dict[str, Any] = {}
    messages: dict[str, type[BaseModel]] = {f"{s}_request": m for s, m in REQUESTS.items()}
    messages |= {f"{step}_response": m for step, m in RESPONSES.items()}
    messages["problem"] = Problem
    for name, model in messages.items():
        schema = model.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(schema.pop("$defs", {}))
        defs[name] = schema
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://deepagents.dev/schemas/remote-agents/v1.json",
        "title": f"deepagents remote agent protocol, version {PROTOCOL_VERSION}",
        "$defs": dict(sorted(defs.items())),
    }
