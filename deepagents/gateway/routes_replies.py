"""/v1/tasks/{id}/reply and /v1/waiting: answer a waiting task's question, list the open
questions. Both see only the caller's tenant's tasks (the gateway's owner records): another
tenant's task is answered 404, as an unknown one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query
from starlette.requests import Request
from starlette.responses import Response

from deepagents.errors import (
    AlreadyReplied,
    ErrorCode,
    InvalidReply,
    NotWaiting,
    PayloadTooLarge,
    ReplyTaskNotFound,
)
from deepagents.gateway.body import READ_BODY_CODES
from deepagents.gateway.problems import FieldError, Problem, responses_for
from deepagents.gateway.questions import decode_cursor, encode_cursor, waiting_view
from deepagents.gateway.routes_tasks import (
    _AUTH,
    PrincipalDep,
    StateDep,
    TaskId,
    _body_doc,
    _json,
    _owned,
    _read_json,
    bearer,
)
from deepagents.gateway.schemas import Replied, ReplyRequest, WaitingList
from deepagents.gateway.state import GatewayState
from deepagents.gateway.submit import validate_body
from deepagents.orchestrator.replies import CheckRunner

router = APIRouter(prefix="/v1", dependencies=[Depends(bearer)], tags=["replies"])

Limit = Annotated[int, Query(ge=1, le=500, description="at most this many on a page")]
Order = Annotated[
    Literal["oldest", "newest"], Query(description="oldest (the default) or newest first")
]
Cursor = Annotated[
    str | None,
    Query(max_length=300, description="where the page starts: the previous page's `next` has it"),
]


@router.post(
    "/tasks/{task_id}/reply",
    response_model=Replied,
    openapi_extra=_body_doc("ReplyRequest"),
    responses=responses_for(
        ErrorCode.NOT_FOUND,
        ErrorCode.NOT_WAITING,
        ErrorCode.ALREADY_REPLIED,
        ErrorCode.INVALID_REPLY,
        ErrorCode.PAYLOAD_TOO_LARGE,
        *READ_BODY_CODES,
        *_AUTH,
    ),
    summary="Answer the question a waiting task asks; the task resumes with the answer",
)
async def reply(
    task_id: TaskId, request: Request, state: StateDep, principal: PrincipalDep
) -> Response:
    async with state.admission.admit(principal.tenant, 1):
        body = validate_body(ReplyRequest, await _read_json(request, state, principal.tenant))
        await _owned(state, task_id, principal.tenant)
        try:
            done = await state.orchestrator.reply(
                task_id, body.answer, _on_budget(state, principal.tenant)
            )
        except ReplyTaskNotFound as exc:
            raise Problem(ErrorCode.NOT_FOUND, f"no task {task_id} for your tenant") from exc
        except NotWaiting as exc:
            raise Problem(ErrorCode.NOT_WAITING, str(exc)) from exc
        except AlreadyReplied as exc:
            raise Problem(ErrorCode.ALREADY_REPLIED, f"{exc}; the first answer stands") from exc
        except InvalidReply as exc:
            field = f"answer.{exc.field}" if exc.field != "answer" else "answer"
            raise Problem(
                ErrorCode.INVALID_REPLY,
                f"{field}: {exc.reason}",
                errors=[FieldError(field=field, message=exc.reason)],
            ) from exc
        except PayloadTooLarge as exc:
            raise Problem(ErrorCode.PAYLOAD_TOO_LARGE, str(exc)) from exc
    return _json(Replied(task_id=task_id, ask=done.ask, waited_s=round(done.waited_s, 3)))


def _on_budget(state: GatewayState, tenant: str) -> CheckRunner:
    """Run a reply's schema check in the parse thread, on the tenant's parse budget: the
    event loop serves other tenants meanwhile, and a tenant whose checks cost time is
    answered 429 as one whose bodies do."""
    limits = state.config.gateway.body

    async def run(check: Callable[[], None]) -> None:
        state.parse_budget.check(tenant, limits)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(state.parser, state.parse_budget.run, tenant, check, limits)

    return run


@router.get(
    "/waiting",
    response_model=WaitingList,
    responses=responses_for(*_AUTH, ErrorCode.VALIDATION_ERROR),
    summary="Your tasks waiting for a reply, oldest first, with their questions, a page at a time",
)
async def waiting(
    state: StateDep,
    principal: PrincipalDep,
    limit: Limit = 100,
    order: Order = "oldest",
    cursor: Cursor = None,
) -> Response:
    after = None
    if cursor is not None:
        try:
            after = decode_cursor(cursor)
        except ValueError as exc:
            raise Problem(
                ErrorCode.VALIDATION_ERROR,
                f"cursor: {exc}",
                errors=[FieldError(field="cursor", message=str(exc))],
            ) from None
    newest = order == "newest"
    async with state.admission.admit(principal.tenant, 1):
        # The tenant's own waiting index: another tenant's thousands of open questions are
        # never read. The owner records still decide what is shown.
        found = await state.orchestrator.waiting_page(
            limit, tenant=principal.tenant, after=after, newest=newest
        )
        owners = await state.tasks.owners([w.task_id for w in found.questions])
    mine = [
        w for w, owner in zip(found.questions, owners, strict=True) if owner == principal.tenant
    ]
    following = None
    if found.next is not None:
        query = urlencode({"limit": limit, "order": order, "cursor": encode_cursor(found.next)})
        following = f"/v1/waiting?{query}"
    return _json(WaitingList(tasks=[waiting_view(w) for w in mine], next=following))
