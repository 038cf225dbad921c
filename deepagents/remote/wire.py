"""The wire protocol's messages, version 1: the one source of ``docs/remote-agents.schema.json``
and of what the worker sends and accepts. ``docs/remote-agents.proto`` maps them one to one."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

PROTOCOL_VERSION: Literal[1] = 1
PREFIX = "/v1"
STEPS = ("can_handle", "prepare_context", "execute", "post_process")
# The one-call forms: the whole contract of one task, or of several in one request.
RUN, RUN_BATCH = "run", "run_batch"
# Pull mode: calls the service makes to the worker.
LEASE, COMPLETE = "lease", "complete"


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


class Problem(_Response):
    """The body of a 4xx or 5xx answer (RFC 7807); optional, read for its detail."""

    type: str = "about:blank"
    title: str | None = None
    status: int | None = None
    detail: str | None = None


class RunResponse(_Response):
    """The whole contract of one task, done by the service: ``can_handle`` false (the task
    is not its to run, and no result), or the result post_process left."""

    can_handle: bool = True
    result: WireResult | None = None

    @model_validator(mode="after")
    def _answered(self) -> RunResponse:
        if self.can_handle and self.result is None:
            raise ValueError("a result is required unless can_handle is false")
        return self


class RunBatchRequest(_Request):
    """Several tasks in one request: each is the request ``run`` would get, and each is
    answered on its own, in any order."""

    protocol: Literal[1] = PROTOCOL_VERSION
    runs: list[StepRequest] = Field(min_length=1)


class RunAnswer(RunResponse):
    """One task's answer in a batch: its id, then what ``run`` would answer, or the problem
    (RFC 7807, with the status an HTTP answer of its own would have had) that ended it."""

    id: str
    problem: Problem | None = None

    @model_validator(mode="after")
    def _answered(self) -> RunAnswer:
        if self.problem is None and self.can_handle and self.result is None:
            raise ValueError("a result or a problem is required unless can_handle is false")
        return self


class RunBatchResponse(_Response):
    answers: list[dict[str, Any]] = Field(
        description="one RunAnswer per task of the request: each is read on its own, so a "
        "malformed one fails its task only"
    )


class LeaseRequest(_Response):
    """Pull mode: a puller asks for up to ``max_tasks`` tasks, waiting up to ``wait_ms`` for
    the first (a long poll; the worker caps it at its ``max_wait_ms``)."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)
    max_tasks: int = Field(default=1, ge=1, le=1000)
    wait_ms: int = Field(default=0, ge=0, le=300_000)
    version: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$",
        description="the version of the agent the puller runs, as in a health answer",
    )


class LeasedTask(StepRequest):
    """One leased task: the request ``run`` would get, with its lease. The lease is the
    puller's until ``lease_ms`` from the answer; past it the worker retries the task and
    refuses its completion."""

    lease: str = Field(description="the lease's id: send it back with the task's answer")
    lease_ms: int = Field(ge=0, description="how long the lease is held, from the answer")


class LeaseResponse(_Request):
    tasks: list[LeasedTask] = Field(description="none when the wait ran out")


class CompleteAnswer(RunAnswer):
    """One leased task's answer: what ``run`` would answer (or a problem), with its lease
    and the task's id."""

    lease: str


class CompleteRequest(_Response):
    answers: list[dict[str, Any]] = Field(
        min_length=1,
        description="one CompleteAnswer per task: each is read on its own, so a malformed "
        "one fails its task only",
    )


class CompleteOutcome(_Request):
    lease: str | None = Field(description="the answer's lease, as sent (null: none)")
    accepted: bool = Field(description="the worker has the answer and will commit it")
    problem: Problem | None = Field(
        default=None,
        description="why not: an unknown, expired or completed lease, or an "
        "answer that does not match the schema (which then fails its task)",
    )


class CompleteResponse(_Request):
    outcomes: list[CompleteOutcome] = Field(description="one per answer, in its order")


Method = Literal["can_handle", "prepare_context", "execute", "post_process", "run", "run_batch"]


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
    json_bytes: bool = Field(
        default=False,
        description=(
            "gRPC only: the service reads each request of the contract from its message's "
            "json field (the request's JSON document, the other fields unset) and may "
            "answer in the answer's json field; the worker then sends that form, which "
            "keeps integers integers (a Struct's numbers are doubles). Ignored over HTTP."
        ),
    )
    methods: list[Method] | None = Field(
        default=None,
        description=(
            "The calls the service implements (absent: the four contract methods). The "
            "worker calls no other: with run_batch it sends several tasks per request, with "
            "run one call per task; otherwise, without can_handle it takes every task its "
            "intents route, without prepare_context it sends an empty context, without "
            "post_process it keeps execute's result. execute is called whatever the list "
            "says when the service implements neither run nor run_batch."
        ),
    )


REQUESTS: dict[str, type[StepRequest]] = {
    "can_handle": StepRequest,
    "prepare_context": StepRequest,
    "execute": ExecuteRequest,
    "post_process": PostProcessRequest,
    "run": StepRequest,
}
RESPONSES: dict[str, type[_Response]] = {
    "can_handle": CanHandleResponse,
    "prepare_context": PrepareContextResponse,
    "execute": ExecuteResponse,
    "post_process": PostProcessResponse,
    "run": RunResponse,
    "health": HealthResponse,
}


def json_schema() -> dict[str, Any]:
    """The protocol as one JSON Schema document: a definition per message."""
    defs: dict[str, Any] = {}
    messages: dict[str, type[BaseModel]] = {f"{s}_request": m for s, m in REQUESTS.items()}
    messages |= {f"{step}_response": m for step, m in RESPONSES.items()}
    messages["run_batch_request"] = RunBatchRequest
    messages["run_batch_response"] = RunBatchResponse
    messages["run_answer"] = RunAnswer
    messages["problem"] = Problem
    messages["lease_request"] = LeaseRequest
    messages["lease_response"] = LeaseResponse
    messages["complete_request"] = CompleteRequest
    messages["complete_answer"] = CompleteAnswer
    messages["complete_response"] = CompleteResponse
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
