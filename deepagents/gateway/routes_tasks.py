"""/v1/tasks: submit one or a batch, read state and result (long-poll), cancel."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Depends, Path, Query
from fastapi.security import HTTPBearer
from starlette.requests import Request
from starlette.responses import Response

from deepagents.contract.codec import decode_result
from deepagents.contract.result import Result
from deepagents.contract.task import Task
from deepagents.errors import DeepAgentsError, ErrorCode, Overloaded, ResultTimeout
from deepagents.gateway.auth import Principal
from deepagents.gateway.body import READ_BODY_CODES, read_body
from deepagents.gateway.problems import Problem, responses_for
from deepagents.gateway.questions import question_view
from deepagents.gateway.schemas import (
    Accepted,
    BatchAccepted,
    BatchRequest,
    Cancelled,
    ResultView,
    SubmitRequest,
    TaskView,
)
from deepagents.gateway.state import GatewayState, get_principal, get_state
from deepagents.gateway.submit import build_tasks, submit_problem, validate_body
from deepagents.orchestrator import TaskHandle
from deepagents.orchestrator.children import children_of
from deepagents.store.tasks import Location

bearer = HTTPBearer(auto_error=False, description="an API key issued per tenant")
router = APIRouter(prefix="/v1", dependencies=[Depends(bearer)], tags=["tasks"])

StateDep = Annotated[GatewayState, Depends(get_state)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
TaskId = Annotated[str, Path(pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="the task's id")]
Wait = Annotated[
    float | None,
    Query(ge=0, le=300, description="seconds to wait for the result (capped by the gateway)"),
]

_AUTH = (
    ErrorCode.UNAUTHORIZED,
    ErrorCode.RATE_LIMITED,
    ErrorCode.TOO_MANY_IN_FLIGHT,
    ErrorCode.UNAVAILABLE,
    ErrorCode.VALIDATION_ERROR,
)
_BODY = (
    *READ_BODY_CODES,
    ErrorCode.UNKNOWN_INTENT,
    ErrorCode.INVALID_PAYLOAD,
    ErrorCode.DEADLINE_PASSED,
    ErrorCode.NOT_BEFORE_TOO_FAR,
    ErrorCode.PAYLOAD_TOO_LARGE,
    ErrorCode.OVERLOADED,
    ErrorCode.BATCH_TOO_LARGE,
    ErrorCode.IDEMPOTENCY_CONFLICT,
)
_WAITED = (ErrorCode.DROPPED,)  # only when ?wait saw the task's result


def _claims(state: GatewayState, tasks: list[Task], tenant: str) -> dict[str, Any]:
    # Owner and location records go with admission, in one round trip with the token
    # bucket, instead of a round trip of their own after the enqueue (CPU per request is
    # mostly per-round-trip client work). Both keep the same TTL (see ``owner_ttl_s``).
    claims = [state.tasks.owner_record(t.task_id, tenant) for t in tasks]
    claims += state.orchestrator.locations(tasks)
    return {"claims": claims, "claim_ttl_s": state.owner_ttl_s}


async def _read_json(request: Request, state: GatewayState, tenant: str) -> Any:
    """The parsed body, on the tenant's parse budget (``budget.py``); a large body is
    parsed in the parse thread, so that the event loop keeps serving meanwhile."""
    limits = state.config.gateway.body
    budget = state.parse_budget
    budget.check(tenant, limits)  # a tenant in debt is refused before its body is read
    body = await read_body(request, limits)
    if len(body) <= limits.inline_parse_bytes:
        return budget.parse(tenant, body, limits)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(state.parser, budget.parse, tenant, body, limits)


def _body_doc(model: str) -> dict[str, Any]:
    schema = {"$ref": f"#/components/schemas/{model}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def _json(model: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        orjson.dumps(model.model_dump(mode="json")),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


def _accepted(handle: TaskHandle) -> Accepted:
    return Accepted(
        task_id=handle.task_id,
        agent=handle.agent,
        tier=handle.tier,
        duplicate=handle.duplicate,
        href=f"/v1/tasks/{handle.task_id}",
        warning=handle.warning,
    )


# The header a 202 carries when a task's agent has no live worker (its body's ``warning``).
WARNING_HEADER = "Deepagents-Warning"


def _warned(headers: dict[str, str], handles: list[TaskHandle]) -> dict[str, str]:
    """``headers`` with the first warning among ``handles``, if any (one line: a header)."""
    warning = next((h.warning for h in handles if h.warning), None)
    return headers if warning is None else {**headers, WARNING_HEADER: warning}


# ResultView is the Result without its task id: its fields, in the Result's order.
_RESULT_FIELDS = set(ResultView.model_fields)


def result_document(result: Result) -> dict[str, Any]:
    """``ResultView``'s JSON from a Result: its fields but the task id, metrics always a
    mapping."""
    data = result.model_dump(mode="json", include=_RESULT_FIELDS)
    data["metrics"] = data.get("metrics") or {}
    return data


def finished_view(handle: TaskHandle, result: Result) -> TaskView:
    """The answer to a submit whose task finished within ``?wait``."""
    return TaskView(
        task_id=handle.task_id,
        state=_done_state(result),
        agent=handle.agent,
        tier=handle.tier,
        result=ResultView.model_validate(result_document(result)),
    )


async def _finished(state: GatewayState, handle: TaskHandle, wait: float) -> Result | None:
    try:
        return await handle.result(timeout=min(wait, state.config.gateway.long_poll_max_s))
    except ResultTimeout:
        return None


def _done_state(result: Result) -> Literal["done", "dead"]:
    return (
        "dead"
        if result.error is not None and result.error.code == ErrorCode.DEAD_LETTERED
        else "done"
    )


async def _submit(state: GatewayState, tasks: list[Task], tenant: str) -> list[TaskHandle]:
    """Submit tasks whose owner and location records the admission step has written."""
    ids = [t.task_id for t in tasks]
    try:
        if len(tasks) == 1:  # concurrent single submits share an enqueue round trip
            handles = [await state.orchestrator.submit(tasks[0], recorded=True)]
        else:
            handles = await state.orchestrator.submit_many(tasks, recorded=ids)
    except Exception as exc:  # on every error path: no record may outlive a refused task
        accepted: list[TaskHandle] = (
            getattr(exc, "accepted", []) if isinstance(exc, Overloaded) else []
        )
        kept = {h.task_id for h in accepted}
        # The owner and location records admission wrote for tasks that were not enqueued.
        await state.tasks.forget_submitted([i for i in ids if i not in kept])
        if not isinstance(exc, DeepAgentsError):
            raise
        raise submit_problem(exc, [h.task_id for h in accepted]) from exc
    for handle in handles:
        state.metrics.submitted.labels(tenant, handle.agent).inc()
    # A duplicate (idempotency key) returns the first task's id. Its owner and location
    # records are written again (NX): the submit that made the task may have failed after
    # its enqueue landed (a cancelled request, Redis gone mid-reply) and removed them. The
    # records admission wrote for this submit's own id go.
    moved = [
        (t.task_id, h)
        for t, h in zip(tasks, handles, strict=True)
        if h.duplicate and h.task_id != t.task_id
    ]
    if moved:
        records = [state.tasks.owner_record(h.task_id, tenant) for _, h in moved]
        records += [
            state.tasks.location_record(h.task_id, Location(h.agent, h.shard, h.tier or ""))
            for _, h in moved
        ]
        await state.tasks.adopt(records, state.owner_ttl_s)
        await state.tasks.forget_submitted([mine for mine, _ in moved])
    return handles


@router.post(
    "/tasks",
    status_code=202,
    response_model=Accepted,
    openapi_extra=_body_doc("SubmitRequest"),
    responses={
        200: {"model": TaskView, "description": "finished within ?wait"},
        **responses_for(*_AUTH, *_BODY, *_WAITED),
    },
    summary="Submit one task",
)
async def submit_one(
    request: Request, state: StateDep, principal: PrincipalDep, wait: Wait = None
) -> Response:
    return await submit_one_core(request, state, principal, wait)


async def submit_one_core(
    request: Request, state: GatewayState, principal: Principal, wait: float | None
) -> Response:
    """``POST /v1/tasks`` once authenticated and ``wait`` validated; ``fastpath`` calls it
    directly, without FastAPI's per-request routing and dependency solving."""
    body = validate_body(SubmitRequest, await _read_json(request, state, principal.tenant))
    tasks = build_tasks([body], principal.tenant, state.orchestrator, batch=False)
    async with state.admission.admit(
        principal.tenant, 1, **_claims(state, tasks, principal.tenant)
    ):
        (handle,) = await _submit(state, tasks, principal.tenant)
        if wait:
            result = await _finished(state, handle, wait)
            if result is not None:
                _refuse_dropped(state, handle, result)
                return _json(finished_view(handle, result))
    headers = _warned({"Location": f"/v1/tasks/{handle.task_id}"}, [handle])
    return _json(_accepted(handle), 202, headers)


def _refuse_dropped(state: GatewayState, handle: TaskHandle, result: Result) -> None:
    """A submitter waiting on a task its tier dropped (on_overdue: drop) is told to come
    back later, as for a refused submit: 503, with Retry-After the tier's max wait (the
    queue was that far behind). The task's own record still reads failed/dropped."""
    if result.error is None or result.error.code != ErrorCode.DROPPED:
        return
    tier = state.config.tiers.get(handle.tier or "")
    retry_s = tier.max_wait_ms / 1000 if tier is not None else 1.0
    raise Problem(
        ErrorCode.DROPPED,
        f"task {handle.task_id} {result.error.message} and was dropped unrun; "
        "submit it again after Retry-After seconds",
        retry_after_s=retry_s,
        headers={"Location": f"/v1/tasks/{handle.task_id}"},
    )


@router.post(
    "/tasks/batch",
    status_code=202,
    response_model=BatchAccepted,
    openapi_extra=_body_doc("BatchRequest"),
    responses=responses_for(*_AUTH, *_BODY),
    summary="Submit a batch of tasks (all or none are validated before any is enqueued)",
)
async def submit_batch(request: Request, state: StateDep, principal: PrincipalDep) -> Response:
    limits = state.config.gateway
    body = validate_body(BatchRequest, await _read_json(request, state, principal.tenant))
    if len(body.tasks) > limits.max_batch:
        raise Problem(
            ErrorCode.BATCH_TOO_LARGE,
            f"the batch holds {len(body.tasks)} tasks; at most {limits.max_batch}",
        )
    tasks = build_tasks(body.tasks, principal.tenant, state.orchestrator, batch=True)
    async with state.admission.admit(
        principal.tenant, len(tasks), **_claims(state, tasks, principal.tenant)
    ):
        handles = await _submit(state, tasks, principal.tenant)
    return _json(BatchAccepted(tasks=[_accepted(h) for h in handles]), 202, _warned({}, handles))


async def _owned(state: GatewayState, task_id: str, tenant: str) -> dict[str, Any]:
    """The task's hash, or 404 when it does not exist *or belongs to another tenant*."""
    owner = await state.tasks.owner(task_id)
    info = await state.orchestrator.lookup(task_id) if owner == tenant else None
    if info is None:
        raise Problem(
            ErrorCode.NOT_FOUND,
            f"no task {task_id} for your tenant (ids expire after {state.settings.result_ttl_s} s)",
        )
    return info


def _view(task_id: str, info: dict[str, Any]) -> TaskView:
    raw = info.get("result")
    result = ResultView.model_validate(result_document(decode_result(raw))) if raw else None
    state = info.get("state") or "unknown"
    if state not in ("queued", "scheduled", "running", "retrying", "waiting", "done", "dead"):
        state = "unknown"
    return TaskView(
        task_id=task_id,
        state=state,
        agent=info["agent"],
        tier=info.get("tier") or info.get("submitted_tier"),
        result=result,
        question=question_view(info),
        parent_id=info.get("parent_id") or None,
        children=children_of(info),
        due_at=_due_at(state, info),
    )


def _due_at(state: str, info: dict[str, Any]) -> datetime | None:
    """When a scheduled task, or a retry, goes to its tier."""
    due = info.get("due_ms")
    if state not in ("scheduled", "retrying") or not due:
        return None
    return datetime.fromtimestamp(int(due) / 1000, UTC)


@router.get(
    "/tasks/{task_id}",
    response_model=TaskView,
    responses=responses_for(ErrorCode.NOT_FOUND, *_AUTH),
    summary="A task's state and result",
)
async def get_task(
    task_id: TaskId, state: StateDep, principal: PrincipalDep, wait: Wait = None
) -> Response:
    async with state.admission.admit(principal.tenant, 1):
        info = await _owned(state, task_id, principal.tenant)
        if wait and info.get("state") not in ("done", "dead"):
            handle = TaskHandle(
                task_id,
                info["agent"],
                info.get("submitted_tier", ""),
                int(info["shard"]),
                False,
                state.orchestrator,
            )
            timeout = min(wait, state.config.gateway.long_poll_max_s)
            orchestrator = state.orchestrator
            with contextlib.suppress(ResultTimeout):
                if info.get("reply") == orchestrator.reply_channel:
                    await handle.result(timeout=timeout)  # our reply channel will answer
                else:  # submitted through another gateway process: only polling sees it
                    await orchestrator.wait_result(handle, timeout, poll_s=0.05, max_poll_s=0.5)
            info = await _owned(state, task_id, principal.tenant)
    return _json(_view(task_id, info))


@router.post(
    "/tasks/{task_id}/cancel",
    response_model=Cancelled,
    responses=responses_for(ErrorCode.NOT_FOUND, ErrorCode.TOO_LATE, *_AUTH),
    summary="Cancel a task that has not ended (queued, scheduled, running or waiting)",
)
async def cancel_task(task_id: TaskId, state: StateDep, principal: PrincipalDep) -> Response:
    async with state.admission.admit(principal.tenant, 1):
        await _owned(state, task_id, principal.tenant)
        outcome = await state.orchestrator.cancel(task_id)
    if outcome == "ok":
        return _json(Cancelled(task_id=task_id, state="done"))
    if outcome == "missing":
        raise Problem(ErrorCode.NOT_FOUND, f"no task {task_id} for your tenant")
    raise Problem(
        ErrorCode.TOO_LATE,
        f"the task is {outcome}; only a task that has not ended can be cancelled",
    )
