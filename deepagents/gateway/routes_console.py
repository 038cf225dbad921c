"""The console at ``/ui`` (docs/console.md): sign-in with an API key, the inbox of waiting
questions, a task's inspector with its answer form, the queues. Pages are HTML rendered on
the server from Redis and the audit store; nothing is kept in the gateway's memory."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Depends
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from deepagents.contract.codec import decode_result
from deepagents.contract.inbox import Inbox, InboxAction, inbox_of
from deepagents.errors import (
    AlreadyReplied,
    ErrorCode,
    InvalidPayload,
    InvalidReply,
    NotWaiting,
    ReplyTaskNotFound,
)
from deepagents.gateway import console_pages as pages
from deepagents.gateway.auth import Principal
from deepagents.gateway.console_forms import (
    FormField,
    answer_from,
    fields_of,
    posted_values,
    shown_values,
)
from deepagents.gateway.console_session import (
    SECURITY_HEADERS,
    SignedOut,
    cleared_cookie_header,
    cookie_header,
    csrf_token,
    form_allowed,
    principal_of,
    same_origin,
)
from deepagents.gateway.problems import Problem
from deepagents.gateway.questions import decode_cursor
from deepagents.gateway.routes_events import events_log
from deepagents.gateway.state import GatewayState, get_state
from deepagents.orchestrator.admin import Admin, DeadLetterNotFound
from deepagents.orchestrator.replies import question_of
from deepagents.store.audit.task_events import OutboxCursor
from deepagents.store.rollout_state import RolloutState
from deepagents.store.webhooks import EndpointStatus, WebhookQueue
from deepagents.transport.base import Waiting, WaitingCursor

router = APIRouter(prefix="/ui", include_in_schema=False)
StateDep = Annotated[GatewayState, Depends(get_state)]
STATIC = Path(__file__).parent / "static"
MAX_FORM_BYTES = 64 * 1024
INBOX_PAGE = 100  # questions on an inbox page unless ?limit= says otherwise
INBOX_MAX_PAGE = 500
DEAD_LETTERS_SCANNED = 1000  # per agent, oldest first: a task dead longer ago needs the CLI


def page(text: str, status: int = 200, headers: dict[str, str] | None = None) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers={**SECURITY_HEADERS, **(headers or {})})


def to_sign_in() -> Response:
    return RedirectResponse("/ui", status_code=303, headers=SECURITY_HEADERS)


async def _form(request: Request) -> dict[str, str]:
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise Problem(ErrorCode.BODY_TOO_LARGE, f"a form holds at most {MAX_FORM_BYTES} bytes")
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))


class Session:
    """The signed-in tenant of one request, or ``SignedOut``."""

    def __init__(self, request: Request, state: GatewayState) -> None:
        principal, key = principal_of(request, state.auth)
        self.principal: Principal = principal
        self.key = key
        self.csrf = csrf_token(key)

    @property
    def tenant(self) -> str:
        return self.principal.tenant


def _session(request: Request, state: GatewayState) -> Session | None:
    try:
        return Session(request, state)
    except SignedOut:
        return None


@router.get("/static/console.css")
async def stylesheet() -> Response:
    return FileResponse(STATIC / "console.css", media_type="text/css", headers=SECURITY_HEADERS)


@router.get("")
async def home(request: Request, state: StateDep) -> Response:
    if _session(request, state) is not None:
        return RedirectResponse("/ui/inbox", status_code=303, headers=SECURITY_HEADERS)
    return page(pages.sign_in())


@router.post("/login")
async def login(request: Request, state: StateDep) -> Response:
    if not same_origin(request):
        return page(pages.message("Refused", "a form from another site", tenant=None), 403)
    key = (await _form(request)).get("key", "").strip()
    try:
        state.auth.authenticate(f"Bearer {key}")
    except Problem:
        return page(
            pages.sign_in("That key is not valid; check the key your operator issued."), 401
        )
    return RedirectResponse(
        "/ui/inbox",
        status_code=303,
        headers={**SECURITY_HEADERS, "Set-Cookie": cookie_header(request, key)},
    )


@router.post("/logout")
async def logout(request: Request, state: StateDep) -> Response:
    session = _session(request, state)
    if session is not None and not form_allowed(
        request, session.key, (await _form(request)).get("csrf")
    ):
        return page(pages.message("Refused", "a form from another site", tenant=None), 403)
    return RedirectResponse(
        "/ui",
        status_code=303,
        headers={**SECURITY_HEADERS, "Set-Cookie": cleared_cookie_header(request)},
    )


@router.get("/inbox")
async def inbox(
    request: Request,
    state: StateDep,
    order: str = "oldest",
    limit: str = "",
    after: str = "",
    before: str = "",
) -> Response:
    session = _session(request, state)
    if session is None:
        return to_sign_in()
    try:
        spot = pages.InboxSpot(
            newest=order == "newest",
            size=_page_size(limit),
            after=decode_cursor(after) if after else None,
            before=decode_cursor(before) if before else None,
        )
    except ValueError as exc:
        text = f"that is not a page of the inbox ({exc})"
        return page(
            pages.message("Not a page", text, tenant=session.tenant, csrf=session.csrf), 400
        )
    async with state.admission.admit(session.tenant, 1):
        shown, earlier, later = await _inbox_page(state, session.tenant, spot)
        owners = await state.tasks.owners([w.task_id for w in shown])
        total = await state.orchestrator.waiting_total(session.tenant)
    mine = [w for w, owner in zip(shown, owners, strict=True) if owner == session.tenant]
    return page(pages.inbox(session.tenant, session.csrf, mine, spot, total, earlier, later))


def _page_size(text: str) -> int:
    if not text:
        return INBOX_PAGE
    if not text.isdigit() or not 1 <= int(text) <= INBOX_MAX_PAGE:
        raise ValueError(f"limit: a whole number from 1 to {INBOX_MAX_PAGE}")
    return int(text)


async def _inbox_page(
    state: GatewayState, tenant: str, spot: pages.InboxSpot
) -> tuple[list[Waiting], WaitingCursor | None, WaitingCursor | None]:
    """The page's questions, in the order shown, with where the pages before and after it
    end and start (None: there is none)."""
    orch = state.orchestrator
    if spot.before is not None:
        # The page before a place: listed the other way from it, then turned round.
        back = await orch.waiting_page(
            spot.size, tenant=tenant, after=spot.before, newest=not spot.newest
        )
        if back.first is not None:
            return list(reversed(back.questions)), back.next, back.first
    start = spot.after if spot.before is None else None  # nothing before it any more: page 1
    found = await orch.waiting_page(spot.size, tenant=tenant, after=start, newest=spot.newest)
    earlier = None if start is None else (found.first or start)
    return found.questions, earlier, found.next


async def _owned(state: GatewayState, session: Session, task_id: str) -> dict[str, Any] | None:
    """The task's record, or None when it does not exist *or is another tenant's*."""
    if not task_id or len(task_id) > 64:
        return None
    owner = await state.tasks.owner(task_id)
    if owner != session.tenant:
        return None
    info = await state.orchestrator.lookup(task_id)
    return info if info is not None and info.get("state") else None


def _not_found(session: Session, task_id: str) -> Response:
    text = f"no task {task_id} for your tenant"
    return page(pages.message("Not found", text, tenant=session.tenant, csrf=session.csrf), 404)


async def _task_page(
    state: GatewayState,
    session: Session,
    task_id: str,
    info: dict[str, Any],
    *,
    values: dict[str, str] | None = None,
    errors: dict[str, str] | None = None,
    notice: str = "",
    status: int = 200,
) -> Response:
    # The events first, then the state: an event is written with (or after) the state it
    # moves to, so the state read after them is at least as new as the newest shown.
    log = events_log(state)
    location = await state.tasks.location(task_id)
    events = [] if location is None else await log.read(location, task_id, OutboxCursor())
    info = await state.orchestrator.lookup(task_id) or info
    question = question_of(info)
    raw = info.get("result")
    shown, inbox, fields = None, None, []
    if question is not None:
        shown = {"ask": question.ask, "question": question.question}
        inbox = inbox_of(question.schema)
        fields = fields_of(inbox.schema if inbox is not None else question.schema)
        if inbox is not None and values is None:
            values = shown_values(fields, inbox.proposal)  # an edit starts from the proposal
    text = pages.task_page(
        tenant=session.tenant,
        csrf=session.csrf,
        task_id=task_id,
        info=info,
        question=shown,
        fields=fields,
        values=values or {},
        errors=errors or {},
        notice=notice,
        events=events,
        result=decode_result(raw).model_dump(mode="json") if raw else None,
        events_recorded=log.recorded,
        dead_letter=await _dead_letter(state, task_id, info),
        inbox=inbox,
    )
    return page(text, status)


async def _dead_letter(state: GatewayState, task_id: str, info: dict[str, Any]) -> str | None:
    """The id of the task's entry in its agent's dead-letter streams, when it is dead."""
    if info.get("state") != "dead":
        return None
    admin = Admin(state.services.bus, state.tasks, state.config)
    found = await admin.list_dead(str(info["agent"]), DEAD_LETTERS_SCANNED)
    return next((d.entry_id for d in found if d.task_id == task_id), None)


@router.get("/tasks/{task_id}")
async def task(request: Request, state: StateDep, task_id: str) -> Response:
    session = _session(request, state)
    if session is None:
        return to_sign_in()
    async with state.admission.admit(session.tenant, 1):
        info = await _owned(state, session, task_id)
        if info is None:
            return _not_found(session, task_id)
        notice = {
            "replied": "Your answer was taken; the task runs again.",
            "cancelled": "Cancelled.",
            "replayed": "Replayed from the dead-letter stream; the task is queued again.",
        }
        return await _task_page(
            state,
            session,
            task_id,
            info,
            notice=notice.get(request.query_params.get("done", ""), ""),
        )


@dataclass(frozen=True, slots=True)
class Action:
    """A checked form posted to act on one of the tenant's tasks."""

    session: Session
    form: dict[str, str]
    info: dict[str, Any]


@asynccontextmanager
async def _acting(
    request: Request, state: GatewayState, task_id: str
) -> AsyncIterator[Action | Response]:
    """The prelude of every form that acts on a task: a session, a form from the console's
    own page (CSRF), the tenant's admission held for the block, and the task, the tenant's
    own. Yields the ``Action``, or the response that refuses it."""
    session = _session(request, state)
    if session is None:
        yield to_sign_in()
        return
    form = await _form(request)
    if not form_allowed(request, session.key, form.get("csrf")):
        text = "this form did not come from the console's own page; nothing was changed"
        yield page(pages.message("Refused", text, tenant=session.tenant, csrf=session.csrf), 403)
        return
    async with state.admission.admit(session.tenant, 1):
        info = await _owned(state, session, task_id)
        yield _not_found(session, task_id) if info is None else Action(session, form, info)


def _done(task_id: str, what: str) -> Response:
    return RedirectResponse(
        f"/ui/tasks/{task_id}?done={what}", status_code=303, headers=SECURITY_HEADERS
    )


@router.post("/tasks/{task_id}/reply")
async def reply(request: Request, state: StateDep, task_id: str) -> Response:
    async with _acting(request, state, task_id) as act:
        if isinstance(act, Response):
            return act
        session, info = act.session, act.info
        question = question_of(info)
        values = posted_values(act.form)
        if question is None or question.ask != act.form.get("ask"):
            return await _answered_elsewhere(state, session, task_id, info)
        inbox = inbox_of(question.schema)
        fields = fields_of(question.schema if inbox is None else inbox.schema)
        if inbox is None:
            answer, errors = answer_from(fields, values)
        else:
            answer, errors = _inbox_answer(inbox, fields, act.form, values)
            if act.form.get("action") != InboxAction.EDIT:  # the edit form shows the proposal
                values = shown_values(fields, inbox.proposal)
            values[pages.RESPONSE] = act.form.get("response", "")
        if errors:
            return await _task_page(
                state, session, task_id, info, values=values, errors=errors, status=422
            )
        try:
            await state.orchestrator.reply(task_id, answer)
        except InvalidReply as exc:
            errors = {_field_of(exc.field, fields, inbox is not None): exc.reason}
            return await _task_page(
                state, session, task_id, info, values=values, errors=errors, status=422
            )
        except (AlreadyReplied, NotWaiting, ReplyTaskNotFound):
            return await _answered_elsewhere(state, session, task_id, info)
    return _done(task_id, "replied")


def _inbox_answer(
    inbox: Inbox, fields: list[FormField], form: dict[str, str], values: dict[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The envelope a question with actions takes (contract/inbox.py), from the form of the
    action the person chose; errors by field as ``answer_from`` gives them."""
    try:
        action = InboxAction(form.get("action", ""))
    except ValueError:
        action = None
    if action is None or action not in inbox.actions:
        offered = ", ".join(a.value for a in inbox.actions)
        return {}, {pages.RESPONSE: f"choose one of the actions offered: {offered}"}
    if action is InboxAction.EDIT:
        value, errors = answer_from(fields, values)
        return {"action": action.value, "value": value}, errors
    if action is InboxAction.RESPOND:
        text = form.get("response", "").strip()
        if not text:
            return {}, {pages.RESPONSE: "write a response"}
        return {"action": action.value, "value": text}, {}
    return {"action": action.value}, {}


def _field_of(path: str, fields: list[FormField], inbox: bool) -> str:
    """The form field a refusal's JSON path names (an envelope's ``value.<field>`` for an
    edit, ``value`` for a response), else the first field."""
    names = {f.name for f in fields}
    if inbox:
        if path in ("value", "action"):
            return pages.RESPONSE
        path = path.removeprefix("value.")
    return path if path in names else fields[0].name


async def _answered_elsewhere(
    state: GatewayState, session: Session, task_id: str, info: dict[str, Any]
) -> Response:
    notice = (
        "This question was answered already (elsewhere); the first answer stands and yours "
        "was not applied."
    )
    return await _task_page(state, session, task_id, info, notice=notice, status=409)


@router.post("/tasks/{task_id}/cancel")
async def cancel(request: Request, state: StateDep, task_id: str) -> Response:
    async with _acting(request, state, task_id) as act:
        if isinstance(act, Response):
            return act
        outcome = await state.orchestrator.cancel(task_id)
        if outcome != "ok":
            notice = f"Too late to cancel: the task is {outcome}."
            return await _task_page(
                state, act.session, task_id, act.info, notice=notice, status=409
            )
    return _done(task_id, "cancelled")


@router.post("/tasks/{task_id}/replay")
async def replay(request: Request, state: StateDep, task_id: str) -> Response:
    async with _acting(request, state, task_id) as act:
        if isinstance(act, Response):
            return act
        session, info = act.session, act.info
        entry = await _dead_letter(state, task_id, info)
        if entry is None or entry != act.form.get("entry"):
            notice = "Not in the dead-letter stream (any more): nothing was replayed."
            return await _task_page(state, session, task_id, info, notice=notice, status=409)
        admin = Admin(state.services.bus, state.tasks, state.config)
        try:
            await admin.replay(entry, agent=str(info["agent"]))
        except (DeadLetterNotFound, InvalidPayload) as exc:
            return await _task_page(state, session, task_id, info, notice=str(exc), status=409)
    return _done(task_id, "replayed")


@router.get("/queues")
async def queues(request: Request, state: StateDep) -> Response:
    session = _session(request, state)
    if session is None:
        return to_sign_in()
    async with state.admission.admit(session.tenant, 1):
        rows = await Admin(state.services.bus, state.tasks, state.config).status()
        found = await state.registry.agents()
        rollouts = await _rollouts(state)
        webhooks = await _webhooks(state, session.tenant)
    now_ms = int(time.time() * 1000)
    workers = {}
    for name, info in found.items():
        window = state.config.agent_settings(name).visibility_timeout_ms
        seen = [int(ms) for ms in dict(info["instances"]).values()]  # type: ignore[call-overload]
        workers[name] = sum(1 for ms in seen if now_ms - ms <= window)
    return page(pages.queues(session.tenant, session.csrf, rows, workers, rollouts, webhooks))


async def _rollouts(state: GatewayState) -> list[RolloutState]:
    """The live state of each configured rollout (weights move at run time: Redis has them)."""
    store = state.services.rollouts
    if store is None:
        return []
    found = [await store.get(agent) for agent in sorted(state.config.rollouts)]
    return [r for r in found if r is not None]


async def _webhooks(state: GatewayState, tenant: str) -> list[EndpointStatus]:
    """The endpoints told of this tenant's tasks (another tenant's endpoints stay hidden)."""
    client = state.services.client
    names = [
        n for n, hook in state.config.webhooks.items() if not hook.tenants or tenant in hook.tenants
    ]
    if client is None or not names:
        return []
    return await WebhookQueue(client, state.services.keys).statuses(names)
