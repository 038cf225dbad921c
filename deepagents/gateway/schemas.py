"""Request and response bodies of the HTTP API (the OpenAPI document is built from these)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from deepagents.contract.task import INTENT_RE


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SubmitRequest(_Body):
    """One task. There is no ``tenant`` (it comes from your API key) and no ``task_id``
    (the gateway assigns one; use ``idempotency_key`` to make retries safe)."""

    intent: str = Field(pattern=INTENT_RE.pattern, examples=["echo"])
    payload: dict[str, Any] = Field(default_factory=dict)
    deadline: AwareDatetime | None = Field(
        default=None, description="RFC 3339 with a zone, e.g. 2030-01-01T00:00:00Z"
    )
    not_before: AwareDatetime | None = Field(
        default=None,
        description="run no earlier than this (RFC 3339 with a zone); state `scheduled` "
        "until then. At most DEEPAGENTS_MAX_SCHEDULE_AHEAD_S ahead",
    )
    delay_s: float | None = Field(
        default=None,
        gt=0,
        strict=True,
        allow_inf_nan=False,
        description="run no earlier than this many seconds from now (instead of not_before)",
    )
    # strict: `true` is not 1, nor "1" or 1.0 (issue 39)
    priority: int | None = Field(
        default=None, ge=0, le=9, strict=True, description="tier hint: 0 = most urgent"
    )
    idempotency_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="the same key (per tenant) returns the first task instead of a new one",
    )
    fairness_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="in a tier with fair_share: the queue this task shares the tier "
        "through, within your tenant's (default: your tenant's own)",
    )
    fairness_weight: float | None = Field(
        default=None,
        gt=0,
        le=1000,
        allow_inf_nan=False,
        description="in a tier with fair_share: the queue's weight (default 1)",
    )
    traceparent: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$",
        description="W3C trace context",
    )


class BatchRequest(_Body):
    tasks: list[SubmitRequest] = Field(min_length=1, description="at most `max_batch` (100)")


class Accepted(BaseModel):
    task_id: str
    agent: str
    tier: str
    duplicate: bool = Field(description="true: an earlier task with this idempotency key")
    href: str = Field(description="where to read the task's state and result")
    warning: str | None = Field(
        default=None,
        description="set when no live worker serves the task's agent: the task is accepted "
        "and waits until one starts (also in the `Deepagents-Warning` header)",
    )


class BatchAccepted(BaseModel):
    tasks: list[Accepted]


class ErrorView(BaseModel):
    code: str
    message: str = ""


class ResultView(BaseModel):
    status: Literal["success", "partial", "failed"]
    output: Any = None
    error: ErrorView | None = None
    degraded: bool = False
    metrics: dict[str, Any] = Field(default_factory=dict)
    agent: str | None = None
    agent_version: str | None = None
    finished_at: datetime | None = None


class QuestionView(BaseModel):
    """The question a waiting task asks a person; answer it with POST /v1/tasks/{id}/reply."""

    ask: str = Field(description="the question's name within the task (1, 2, ...)")
    question: str
    answer_schema: dict[str, Any] = Field(description="JSON Schema the answer must match")
    asked_at: datetime
    age_s: float
    timeout_at: datetime = Field(description="when on_timeout applies, or the deadline ends it")
    on_timeout: Literal["fail", "default", "escalate"] | str


class TaskView(BaseModel):
    task_id: str
    state: Literal[
        "queued", "scheduled", "running", "retrying", "waiting", "done", "dead", "unknown"
    ]
    agent: str
    tier: str | None = None
    result: ResultView | None = Field(default=None, description="set when state is done or dead")
    question: QuestionView | None = Field(default=None, description="set when state is waiting")
    parent_id: str | None = Field(
        default=None, description="the task that delegated this one (ctx.delegate)"
    )
    children: list[str] = Field(
        default_factory=list, description="the child tasks this one delegated to, in order"
    )
    due_at: datetime | None = Field(
        default=None, description="set when state is scheduled or retrying: when it is due"
    )


class ReplyRequest(_Body):
    """The answer to a waiting task's question: any JSON its ``answer_schema`` accepts."""

    answer: Any = Field(examples=[{"approved": True}])


class Replied(BaseModel):
    task_id: str
    ask: str
    state: Literal["queued"] = Field(
        default="queued", description="the task is queued again, with the answer"
    )
    waited_s: float = Field(description="the question's age when the answer landed")


class WaitingView(BaseModel):
    task_id: str
    agent: str
    ask: str
    question: str
    asked_at: datetime
    age_s: float
    timeout_at: datetime
    on_timeout: str


class WaitingList(BaseModel):
    tasks: list[WaitingView] = Field(description="open questions, oldest (or newest) first")
    next: str | None = Field(
        default=None,
        description="the path of the next page (the same order and limit); null on the last",
    )


class Cancelled(BaseModel):
    task_id: str
    state: Literal["done"] = Field(description="a cancelled task is done with error `cancelled`")
    cancelled: Literal[True] = True


class AgentView(BaseModel):
    name: str
    version: str
    intents: list[str]
    instances: int = Field(description="instances seen within the liveness window")
    healthy: bool = Field(description="at least one live instance")
    last_seen_ms: int | None = Field(default=None, description="Unix ms of the latest heartbeat")


class AgentList(BaseModel):
    agents: list[AgentView]


class Hop(BaseModel):
    name: Literal["redis", "enqueue", "queue", "worker", "reply"]
    ok: bool
    latency_ms: float | None = None
    detail: str = ""


class UnhealthyAgent(BaseModel):
    name: str
    instances: int = Field(description="instances seen in the last ten minutes")
    healthy: int = Field(description="of them, heartbeating and passing their health check")
    circuit: str | None = Field(
        default=None,
        description="a remote agent's service: the fleet's circuit breaker (closed, open, "
        "half_open)",
    )
    detail: str = Field(default="", description="why an instance's last health check failed")


class Health(BaseModel):
    status: Literal["ok", "fail"]
    redis_ms: float | None = None
    hops: list[Hop] = Field(default_factory=list, description="set by ?full=true")
    failed_hop: str | None = None
    unhealthy_agents: list[UnhealthyAgent] = Field(
        default_factory=list,
        description="set by ?full=true: agent types with an instance that is silent or failing "
        "its health check, or a remote service whose circuit is not closed",
    )
