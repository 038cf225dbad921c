"""``GET /v1/tasks/{id}/events``: a task's audit events as server-sent events, resumable
with ``Last-Event-ID`` (docs/gateway.md, "Following a task")."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Annotated

import orjson
from fastapi import APIRouter, Depends, Header, Path
from fastapi.security import HTTPBearer
from starlette.responses import StreamingResponse

from deepagents.errors import ErrorCode
from deepagents.gateway.auth import Principal
from deepagents.gateway.problems import Problem, responses_for
from deepagents.gateway.state import GatewayState, get_principal, get_state
from deepagents.store.audit.task_events import TaskEvent, TaskEventFollower, TaskEventLog
from deepagents.store.tasks import Location

bearer = HTTPBearer(auto_error=False, description="an API key issued per tenant")
router = APIRouter(prefix="/v1", dependencies=[Depends(bearer)], tags=["tasks"])

StateDep = Annotated[GatewayState, Depends(get_state)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
TaskId = Annotated[str, Path(pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="the task's id")]
LastEventId = Annotated[
    str | None,
    Header(
        alias="Last-Event-ID",
        pattern=r"^[0-9a-f-]{36}$",
        description="resume after this event (an audit event id)",
    ),
]

# How often a follower reads the outbox and the audit store: every POLL_S after an event,
# doubling while nothing happens up to IDLE_POLL_S (an idle subscriber costs a read a second).
POLL_S = 0.25
IDLE_POLL_S = 1.0
KEEPALIVE_S = 15.0  # a comment line, so proxies keep an idle stream open
RETRY_MS = 1000  # what the browser's EventSource waits before it reconnects

_SSE = {
    "description": "the task's audit events, in id order; the stream ends after its result",
    "content": {"text/event-stream": {"schema": {"type": "string"}}},
}


def event_lines(event: TaskEvent) -> bytes:
    """One server-sent event: the audit event id, its type, its JSON (one line)."""
    data = orjson.dumps(event.data)
    return b"id: %s\nevent: %s\ndata: %s\n\n" % (
        event.event_id.encode(),
        event.type.encode(),
        data,
    )


def events_log(state: GatewayState) -> TaskEventLog:
    if state.events is None:
        client = state.services.client
        if client is None:  # the gateway always runs on Redis (app.py)
            raise Problem(ErrorCode.UNAVAILABLE, "the gateway has no Redis client", retry_after_s=1)
        state.events = TaskEventLog(client, state.services.keys, state.settings)
    return state.events


async def _owned_location(state: GatewayState, task_id: str, tenant: str) -> Location:
    """Where the task lives, or 404 when it does not exist *or belongs to another tenant*."""
    owner = await state.tasks.owner(task_id)
    location = await state.tasks.location(task_id) if owner == tenant else None
    if location is None:
        raise Problem(
            ErrorCode.NOT_FOUND,
            f"no task {task_id} for your tenant (ids expire after {state.settings.result_ttl_s} s)",
        )
    return location


async def follow(follower: TaskEventFollower) -> AsyncIterator[bytes]:
    """The stream's bytes: every event once, in id order, until a final one; a keep-alive
    comment while nothing happens."""
    yield b"retry: %d\n\n" % RETRY_MS
    quiet_since = time.monotonic()
    pause = POLL_S
    while True:
        fresh = await follower.poll()
        for event in fresh:
            yield event_lines(event)
        if any(e.final for e in fresh):
            return
        if fresh:
            quiet_since = time.monotonic()
            pause = POLL_S
        else:
            pause = min(pause * 2, IDLE_POLL_S)
            if time.monotonic() - quiet_since >= KEEPALIVE_S:
                yield b": keep-alive\n\n"
                quiet_since = time.monotonic()
        await asyncio.sleep(pause)


@router.get(
    "/tasks/{task_id}/events",
    response_class=StreamingResponse,
    responses={
        200: _SSE,
        **responses_for(ErrorCode.NOT_FOUND, ErrorCode.UNAUTHORIZED, ErrorCode.VALIDATION_ERROR),
    },
    summary="Follow a task: its audit events as server-sent events",
)
async def task_events(
    task_id: TaskId,
    state: StateDep,
    principal: PrincipalDep,
    last_event_id: LastEventId = None,
) -> StreamingResponse:
    async with state.admission.admit(principal.tenant, 1):
        location = await _owned_location(state, task_id, principal.tenant)
    log = events_log(state)
    if not log.recorded:
        raise Problem(
            ErrorCode.NOT_FOUND,
            "this deployment records no task events: its processes run without the audit "
            "outbox (set DEEPAGENTS_OUTBOX=true on the gateway and the workers)",
        )
    follower = TaskEventFollower(log, location, task_id, last_event_id)
    return StreamingResponse(
        follow(follower),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
