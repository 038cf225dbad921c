"""A2A at the gateway's edge (docs/gateway.md, "A2A"): the agent cards and the JSON-RPC
binding of the A2A methods, over the task API's own paths (tenants, API keys, admission,
the human-reply path, the task events).

Mounted by ``app.py`` when ``gateway.a2a.enabled`` (the ``a2a`` extra): this module imports
the SDK, and nothing imports this module otherwise. The SDK's types check each request's
params (``ParseDict``); the dispatch is the gateway's own, so that a body is read under the
gateway's limits and parser, a refusal of the transport (no key, 429, 413) is the problem
document every route answers, and each A2A error carries one message saying what to change.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from a2a.types import a2a_pb2 as a2a
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, VERSION_HEADER
from a2a.utils.errors import (
    JSON_RPC_ERROR_CODE_MAP,
    A2AError,
    ContentTypeNotSupportedError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
    VersionNotSupportedError,
)
from fastapi import FastAPI
from google.protobuf.json_format import ParseDict
from google.protobuf.message import Message
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from deepagents._internal.ids import uuid7_str
from deepagents.errors import (
    AlreadyReplied,
    ConfigError,
    DeepAgentsError,
    ErrorCode,
    InvalidReply,
    NotWaiting,
    PayloadTooLarge,
    ReplyTaskNotFound,
)
from deepagents.gateway.a2a_card import card_document
from deepagents.gateway.a2a_tasks import (
    INPUT_REQUIRED,
    SETTLED,
    TERMINAL,
    PartsError,
    answer_of,
    payload_of,
    state_of,
    task_document,
)
from deepagents.gateway.auth import Principal, authorization
from deepagents.gateway.problems import Problem, problem_response
from deepagents.gateway.routes_events import events_log
from deepagents.gateway.routes_replies import _on_budget
from deepagents.gateway.routes_tasks import _claims, _owned, _read_json, _submit
from deepagents.gateway.schemas import SubmitRequest
from deepagents.gateway.state import GatewayState
from deepagents.gateway.submit import build_tasks
from deepagents.orchestrator.routing import AgentSpec, internal
from deepagents.store.audit.task_events import TaskEvent, TaskEventFollower

# How often a blocking SendMessage looks at its task: from SETTLE_POLL_S, doubling while
# nothing changes, up to SETTLE_MAX_POLL_S.
SETTLE_POLL_S = 0.02
SETTLE_MAX_POLL_S = 0.25
KEEPALIVE_S = 15.0
_FOLLOW_POLL_S = 0.1
_FOLLOW_IDLE_S = 1.0

# Refusals of the transport stay HTTP answers (problem documents), as on every route:
# a client's HTTP layer acts on them (re-authenticate, back off for Retry-After, send less).
_HTTP_LEVEL = frozenset({401, 408, 413, 415, 429, 503})
# What a problem of the task API means in A2A's errors.
_PROBLEM_ERRORS: dict[ErrorCode, type[A2AError]] = {
    ErrorCode.NOT_FOUND: TaskNotFoundError,
    ErrorCode.TOO_LATE: TaskNotCancelableError,
    ErrorCode.NOT_WAITING: UnsupportedOperationError,
    ErrorCode.ALREADY_REPLIED: UnsupportedOperationError,
}


@dataclass(frozen=True, slots=True)
class Call:
    """One authenticated JSON-RPC request to one agent type's endpoint."""

    state: GatewayState
    principal: Principal
    spec: AgentSpec

    @property
    def tenant(self) -> str:
        return self.principal.tenant


# A stream's items; None: nothing happened for a while (a keep-alive comment goes out, so
# that proxies keep an idle stream open).
Stream = AsyncIterator[dict[str, Any] | None]
Handler = Callable[[Call, Any, dict[str, Any]], Awaitable[dict[str, Any] | Stream]]


def mount(app: FastAPI, default_agent: str | None, agents: list[str]) -> None:
    """Add the cards and the JSON-RPC endpoint to ``app``. Outside the OpenAPI document:
    an A2A client learns the endpoint from the card, and its errors are JSON-RPC's."""
    if default_agent is not None and default_agent not in agents:
        raise ConfigError(
            f"gateway.a2a.default_agent: no agent type {default_agent!r} "
            f"(known: {', '.join(sorted(agents)) or 'none'})"
        )
    app.add_route(
        "/a2a/{agent}" + AGENT_CARD_WELL_KNOWN_PATH, _card, ["GET"], include_in_schema=False
    )
    app.add_route("/a2a/{agent}", _rpc, ["POST"], include_in_schema=False)
    if default_agent is not None:

        async def default_card(request: Request) -> Response:
            return await _card(request, default_agent)

        app.add_route(AGENT_CARD_WELL_KNOWN_PATH, default_card, ["GET"], include_in_schema=False)


def _state(request: Request) -> GatewayState:
    state: GatewayState = request.app.state.gateway
    return state


def _spec(state: GatewayState, agent: str) -> AgentSpec:
    spec = state.orchestrator.router.specs.get(agent)
    if spec is None or not [i for i in spec.intents if not internal(i)]:
        known = ", ".join(
            sorted(
                n
                for n, s in state.orchestrator.router.specs.items()
                if any(not internal(i) for i in s.intents)
            )
        )
        raise Problem(ErrorCode.NOT_FOUND, f"no agent type {agent!r} (known: {known or 'none'})")
    return spec


def _base_url(state: GatewayState, request: Request) -> str:
    configured = state.config.gateway.a2a.public_url
    return configured if configured is not None else str(request.base_url)


async def _card(request: Request, agent: str | None = None) -> Response:
    state = _state(request)
    try:
        spec = _spec(state, agent or request.path_params["agent"])
    except Problem as exc:
        return problem_response(exc, request)
    streaming = events_log(state).recorded
    document = card_document(spec, _base_url(state, request), streaming=streaming)
    return Response(
        orjson.dumps(document),
        media_type="application/json",
        headers={"Cache-Control": "no-cache"},
    )


# the JSON-RPC endpoint ---------------------------------------------------------------------


async def _rpc(request: Request) -> Response:
    state = _state(request)
    try:
        principal = state.auth.authenticate(authorization(request.headers))
        spec = _spec(state, request.path_params["agent"])
        body = await _read_json(request, state, principal.tenant)
    except Problem as exc:
        if exc.status in _HTTP_LEVEL or exc.code == ErrorCode.NOT_FOUND:
            return problem_response(exc, request)
        return _error(None, JSONParseError(exc.detail))
    call = Call(state, principal, spec)
    rpc_id = _request_id(body)
    try:
        method, params = _envelope(body)
        _check_version(request)
        handler, model = _method(method)
        parsed = _params(params, model)
        _check_tenant(parsed, principal)
        outcome = await handler(call, parsed, params)
    except A2AError as exc:
        return _error(rpc_id, exc)
    except Problem as exc:
        if exc.status in _HTTP_LEVEL:
            return problem_response(exc, request)
        return _error(rpc_id, _problem_error(exc))
    if isinstance(outcome, dict):
        return _json({"jsonrpc": "2.0", "id": rpc_id, "result": outcome})
    return StreamingResponse(
        _sse(rpc_id, outcome),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def _json(document: dict[str, Any]) -> Response:
    return Response(orjson.dumps(document), media_type="application/json")


def _error(rpc_id: Any, exc: A2AError) -> Response:
    return _json(_error_document(rpc_id, exc))


def _error_document(rpc_id: Any, exc: A2AError) -> dict[str, Any]:
    code = JSON_RPC_ERROR_CODE_MAP.get(type(exc), JSON_RPC_ERROR_CODE_MAP[InternalError])
    message = " ".join(str(exc.message).split())  # one line, whatever a parser said
    return {"jsonrpc": "2.0", "id": rpc_id, "error": {"code": code, "message": message}}


def _problem_error(problem: Problem) -> A2AError:
    kind = _PROBLEM_ERRORS.get(problem.code, InvalidParamsError)
    return kind(problem.detail)


def _request_id(body: Any) -> Any:
    """The request's id, when it can answer an error (None otherwise)."""
    rpc_id = body.get("id") if isinstance(body, dict) else None
    return rpc_id if isinstance(rpc_id, str | int) and not isinstance(rpc_id, bool) else None


def _envelope(body: Any) -> tuple[str, dict[str, Any]]:
    """The request's method and params, or ``InvalidRequestError`` saying what is wrong."""
    if isinstance(body, list):
        raise InvalidRequestError("batch requests are not supported: send one request object")
    if not isinstance(body, dict):
        raise InvalidRequestError("the body must be a JSON-RPC request object")
    rpc_id = body.get("id")
    if isinstance(rpc_id, bool) or not isinstance(rpc_id, str | int | type(None)):
        raise InvalidRequestError("id must be a string, an integer or null")
    if body.get("jsonrpc") != "2.0":
        raise InvalidRequestError('jsonrpc must be "2.0"')
    method = body.get("method")
    if not isinstance(method, str) or not method:
        raise InvalidRequestError("method must be a non-empty string")
    params = body.get("params", {})
    if not isinstance(params, dict):
        raise InvalidParamsError("params must be an object")
    return method, params


def _check_version(request: Request) -> None:
    """``A2A-Version``: 1.x is served; none is taken as the current version (a client of
    another major version sends its own)."""
    version = request.headers.get(VERSION_HEADER)
    if not version:
        return
    major = version.strip().split(".")[0]
    if major != "1":
        raise VersionNotSupportedError(
            f"A2A-Version {version[:20]!r} is not served here: this gateway speaks 1.0"
        )


def _params(params: dict[str, Any], model: type[Message]) -> Any:
    try:
        return ParseDict(params, model(), ignore_unknown_fields=True)
    except Exception as exc:  # ParseError, and TypeError/ValueError of odd shapes
        raise InvalidParamsError(f"params: {str(exc)[:300]}") from None


def _check_tenant(parsed: Any, principal: Principal) -> None:
    tenant = getattr(parsed, "tenant", "")
    if tenant and tenant != principal.tenant:
        raise InvalidParamsError(
            "tenant: not allowed to differ from your API key's tenant; leave it out"
        )


def _method(name: str) -> tuple[Handler, type[Message]]:
    found = _METHODS.get(name)
    if found is not None:
        return found
    if name in _UNSUPPORTED:
        kind, why = _UNSUPPORTED[name]
        raise kind(why)
    served = ", ".join(_METHODS)
    raise MethodNotFoundError(f"no method {name[:60]!r}; this endpoint serves {served}")


# the methods ---------------------------------------------------------------------------------


async def send_message(
    call: Call, request: a2a.SendMessageRequest, raw: dict[str, Any]
) -> dict[str, Any]:
    document = await _deliver(call, request, raw)
    if not request.configuration.return_immediately and state_of(document) not in SETTLED:
        document = await _settle(call, document["id"])
    return {"task": document}


async def send_streaming_message(
    call: Call, request: a2a.SendMessageRequest, raw: dict[str, Any]
) -> Stream:
    # Only what happens from now on: an answer's stream must not replay the question it
    # answers (event ids are UUIDv7, ordered by time).
    since = uuid7_str()
    document = await _deliver(call, request, raw)
    return await _follow(call, document, since=since, to_input=True)


async def get_task(call: Call, request: a2a.GetTaskRequest, raw: dict[str, Any]) -> dict[str, Any]:
    return await _task(call, _task_id(request.id))


async def cancel_task(
    call: Call, request: a2a.CancelTaskRequest, raw: dict[str, Any]
) -> dict[str, Any]:
    state, task_id = call.state, _task_id(request.id)
    async with state.admission.admit(call.tenant, 1):
        _check_agent(call, task_id, await _owned(state, task_id, call.tenant))
        outcome = await state.orchestrator.cancel(task_id)
    if outcome == "missing":
        raise TaskNotFoundError(f"no task {task_id} for your tenant")
    if outcome != "ok":
        raise TaskNotCancelableError(
            f"task {task_id} is {outcome}; only a task that has not ended can be canceled"
        )
    return await _task(call, task_id)


async def subscribe_to_task(
    call: Call, request: a2a.SubscribeToTaskRequest, raw: dict[str, Any]
) -> Stream:
    document = await _task(call, _task_id(request.id))
    if state_of(document) in TERMINAL:
        raise UnsupportedOperationError(
            f"task {document['id']} has ended ({state_of(document)}); GetTask reads its result"
        )
    return await _follow(call, document)


_METHODS: dict[str, tuple[Handler, type[Message]]] = {
    "SendMessage": (send_message, a2a.SendMessageRequest),
    "SendStreamingMessage": (send_streaming_message, a2a.SendMessageRequest),
    "GetTask": (get_task, a2a.GetTaskRequest),
    "CancelTask": (cancel_task, a2a.CancelTaskRequest),
    "SubscribeToTask": (subscribe_to_task, a2a.SubscribeToTaskRequest),
}
_PUSH = (
    PushNotificationNotSupportedError,
    "push notifications are not served: follow a task with SubscribeToTask",
)
_UNSUPPORTED: dict[str, tuple[type[A2AError], str]] = {
    "ListTasks": (
        UnsupportedOperationError,
        "ListTasks is not served: keep the ids SendMessage answered",
    ),
    "GetExtendedAgentCard": (UnsupportedOperationError, "there is no extended agent card"),
    "CreateTaskPushNotificationConfig": _PUSH,
    "GetTaskPushNotificationConfig": _PUSH,
    "ListTaskPushNotificationConfigs": _PUSH,
    "DeleteTaskPushNotificationConfig": _PUSH,
}


def _task_id(value: str) -> str:
    if not value or len(value) > 64 or not all(c.isalnum() or c in "_.-" for c in value):
        raise InvalidParamsError("id: a task id of 1 to 64 letters, digits, '_', '.' or '-'")
    return value


async def _task(call: Call, task_id: str) -> dict[str, Any]:
    async with call.state.admission.admit(call.tenant, 1):
        info = await _owned(call.state, task_id, call.tenant)
    _check_agent(call, task_id, info)
    return task_document(task_id, info)


def _check_agent(call: Call, task_id: str, info: dict[str, Any]) -> None:
    """A task is read through its own agent type's endpoint (another's does not know it)."""
    if info.get("agent") != call.spec.name:
        raise TaskNotFoundError(f"no task {task_id} of agent type {call.spec.name!r}")


async def _deliver(
    call: Call, request: a2a.SendMessageRequest, raw: dict[str, Any]
) -> dict[str, Any]:
    """A new task for a message without a task id; the answer to the task's question for a
    message naming one. The task's document after it."""
    message = raw.get("message")
    if not request.HasField("message") or not isinstance(message, dict):
        raise InvalidParamsError("message: required")
    parts = message.get("parts")
    if not isinstance(parts, list):
        raise InvalidParamsError("message.parts: required (a list of parts)")
    try:
        if request.message.task_id:
            return await _answer(call, _task_id(request.message.task_id), answer_of(parts))
        return await _submit_new(call, request.message, payload_of(parts))
    except PartsError as exc:
        kind = ContentTypeNotSupportedError if exc.unsupported else InvalidParamsError
        raise kind(str(exc)) from None


def _intent(spec: AgentSpec, message: a2a.Message) -> str:
    intents = [i for i in spec.intents if not internal(i)]
    named = message.metadata.fields.get("intent") if message.HasField("metadata") else None
    if named is None:
        if len(intents) == 1:
            return intents[0]
        raise InvalidParamsError(
            f"message.metadata.intent: required, {spec.name!r} serves {', '.join(intents)}"
        )
    intent = str(named.string_value)
    if intent not in intents:
        raise InvalidParamsError(
            f"message.metadata.intent: {spec.name!r} serves {', '.join(intents)}, "
            f"not {intent[:64]!r}"
        )
    return intent


async def _submit_new(call: Call, message: a2a.Message, payload: dict[str, Any]) -> dict[str, Any]:
    if not message.message_id:
        raise InvalidParamsError("message.messageId: required (it makes a resend safe)")
    if len(message.message_id) > 200:
        raise InvalidParamsError("message.messageId: at most 200 characters")
    state, tenant = call.state, call.tenant
    body = SubmitRequest(
        intent=_intent(call.spec, message),
        payload=payload,
        # A resent message (same messageId, same tenant) finds its first task.
        idempotency_key=f"a2a:{message.message_id}",
    )
    tasks = build_tasks([body], tenant, state.orchestrator, batch=False)
    async with state.admission.admit(tenant, 1, **_claims(state, tasks, tenant)):
        (handle,) = await _submit(state, tasks, tenant)
    info = await state.orchestrator.lookup(handle.task_id)
    if info is None:  # ended and expired already: not in this life of a task
        info = {"agent": handle.agent, "state": "queued"}
    return task_document(handle.task_id, info)


async def _answer(call: Call, task_id: str, answer: Any) -> dict[str, Any]:
    """The next message on a task that is ``input-required`` answers its question, through
    the reply path of ``POST /v1/tasks/{id}/reply`` (schema, one answer per question)."""
    state, tenant = call.state, call.tenant
    async with state.admission.admit(tenant, 1):
        info = await _owned(state, task_id, tenant)
        _check_agent(call, task_id, info)
        try:
            await state.orchestrator.reply(task_id, answer, _on_budget(state, tenant))
        except ReplyTaskNotFound as exc:
            raise TaskNotFoundError(f"no task {task_id} for your tenant") from exc
        except NotWaiting as exc:
            raise UnsupportedOperationError(
                f"task {task_id} is not waiting for input ({exc}); a message on a task "
                "answers its question"
            ) from exc
        except AlreadyReplied as exc:
            raise UnsupportedOperationError(f"{exc}; the first answer stands") from exc
        except InvalidReply as exc:
            where = "message.parts" + ("" if exc.field == "answer" else f": {exc.field}")
            raise InvalidParamsError(f"{where}: {exc.reason}") from exc
        except PayloadTooLarge as exc:
            raise InvalidParamsError(f"message.parts: {exc}") from exc
        info = await _owned(state, task_id, tenant)
    return task_document(task_id, info)


async def _settle(call: Call, task_id: str) -> dict[str, Any]:
    """The task's document once it ended or asks for input, or as it is after the
    gateway's long-poll limit (the client goes on with GetTask or SubscribeToTask)."""
    state = call.state
    until = time.monotonic() + state.config.gateway.long_poll_max_s
    pause = SETTLE_POLL_S
    while True:
        info = await _owned(state, task_id, call.tenant)
        document = task_document(task_id, info)
        if state_of(document) in SETTLED or time.monotonic() >= until:
            return document
        await asyncio.sleep(pause)
        pause = min(pause * 2, SETTLE_MAX_POLL_S)


# following a task ------------------------------------------------------------------------------


async def _follow(
    call: Call, first: dict[str, Any], *, since: str | None = None, to_input: bool = False
) -> Stream:
    """The task, then a status update per audit event of the task (the events of
    ``GET /v1/tasks/{id}/events``, each in the update's metadata; those after ``since``),
    until one that ends it: its result as an artifact update, then the final status.
    ``to_input``: the stream of a message ends at a question too (A2A's interrupted state);
    a subscriber follows the task on through its answer."""
    state, task_id = call.state, first["id"]
    log = events_log(state)
    if not log.recorded:
        raise UnsupportedOperationError(
            "this deployment records no task events (DEEPAGENTS_OUTBOX is off): "
            "use SendMessage and GetTask"
        )
    location = await state.tasks.location(task_id)
    if location is None:
        raise TaskNotFoundError(f"no task {task_id} for your tenant")
    follower = TaskEventFollower(log, location, task_id, since)
    return _updates(call, first, follower, SETTLED if to_input else TERMINAL)


async def _updates(
    call: Call, first: dict[str, Any], follower: TaskEventFollower, ends: frozenset[str]
) -> Stream:
    task_id = first["id"]
    yield {"task": first}
    if state_of(first) in ends:
        return
    pause = _FOLLOW_POLL_S
    quiet_since = time.monotonic()
    while True:
        fresh = await follower.poll()
        for event in fresh:
            update = await _update(call, task_id, event)
            for item in update:
                yield item
            if event.final or (event.type == "waiting" and INPUT_REQUIRED in ends):
                return
        if fresh:
            pause, quiet_since = _FOLLOW_POLL_S, time.monotonic()
        else:
            pause = min(pause * 2, _FOLLOW_IDLE_S)
            if time.monotonic() - quiet_since >= KEEPALIVE_S:
                yield None
                quiet_since = time.monotonic()
        await asyncio.sleep(pause)


async def _update(call: Call, task_id: str, event: TaskEvent) -> list[dict[str, Any]]:
    """What one audit event says in A2A: a status update, the task's state as it is read
    now (an ended task: its result first, as an artifact update)."""
    info = await call.state.orchestrator.lookup(task_id) or {"state": "queued"}
    document = task_document(task_id, info)
    status = document["status"]
    metadata = {"event": {"id": event.event_id, "type": event.type, "data": event.data}}
    out: list[dict[str, Any]] = []
    if event.final:
        for artifact in document.get("artifacts", []):
            out.append(
                {
                    "artifactUpdate": {
                        "taskId": task_id,
                        "contextId": task_id,
                        "artifact": artifact,
                        "lastChunk": True,
                    }
                }
            )
    out.append(
        {
            "statusUpdate": {
                "taskId": task_id,
                "contextId": task_id,
                "status": status,
                "metadata": metadata,
            }
        }
    )
    return out


async def _sse(rpc_id: Any, stream: Stream) -> AsyncIterator[bytes]:
    """Each item as one JSON-RPC response in a server-sent event; an error ends the stream
    as an ``error`` event."""
    try:
        async for item in stream:
            if item is None:
                yield b": keep-alive\n\n"
                continue
            body = orjson.dumps({"jsonrpc": "2.0", "id": rpc_id, "result": item})
            yield b"data: " + body + b"\n\n"
    except A2AError as exc:
        yield b"event: error\ndata: " + orjson.dumps(_error_document(rpc_id, exc)) + b"\n\n"
    except DeepAgentsError as exc:
        error = InternalError(f"{exc.code}: the stream stopped; SubscribeToTask resumes it")
        yield b"event: error\ndata: " + orjson.dumps(_error_document(rpc_id, error)) + b"\n\n"
    finally:
        with contextlib.suppress(Exception):
            await stream.aclose()  # type: ignore[attr-defined]
