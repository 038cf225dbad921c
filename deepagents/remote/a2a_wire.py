"""The calls to an external A2A agent (JSON-RPC binding, protocol 1.0) through the SDK's
own transport, and its answers as what the worker acts on (docs/remote-agents.md, "A2A").

Imported only for an agent type configured ``remote: {protocol: a2a}`` (the ``a2a`` extra).
Failures become the remote wire's own errors (``errors.py``), so the fleet's breaker, the
retry decision and the audit treat an A2A service as any other remote service.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass
from typing import Any

import httpx
from a2a.client.client import ClientCallContext
from a2a.client.errors import A2AClientError, A2AClientTimeoutError
from a2a.client.transports.jsonrpc import JsonRpcTransport
from a2a.types import a2a_pb2 as a2a
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, PROTOCOL_VERSION_CURRENT, VERSION_HEADER
from a2a.utils.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
)
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict, ParseDict

from deepagents.errors import InvalidInput, RemoteProtocolError
from deepagents.remote.errors import (
    RemoteRejected,
    ServiceDown,
    ServiceUnreachable,
    hide_addresses,
    mask_secrets,
    status_error,
)

STEP = "execute"
# A blocking SendMessage returns at these: an end, or a question (A2A's interrupted states).
SETTLED_STATES = frozenset(
    {
        "TASK_STATE_COMPLETED",
        "TASK_STATE_FAILED",
        "TASK_STATE_CANCELED",
        "TASK_STATE_REJECTED",
        "TASK_STATE_INPUT_REQUIRED",
        "TASK_STATE_AUTH_REQUIRED",
    }
)
# While a blocking SendMessage came back before the task settled: GetTask this often.
POLL_S = 0.05
MAX_POLL_S = 1.0


@dataclass(frozen=True, slots=True)
class Outcome:
    """Where the remote task stands after a call: its id, its A2A state (the enum's name),
    the text of its status message, and its output (artifacts, or a reply message)."""

    task_id: str
    state: str
    text: str
    output: Any

    def as_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "state": self.state,
            "text": self.text,
            "output": self.output,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Outcome:
        return cls(value["task_id"], value["state"], value["text"], value.get("output"))


class A2AWire:
    """One httpx client per agent instance: no redirects, no proxies or cookies from the
    environment (as the HTTP wire, ``http_wire.py``), at most ``max_connections``."""

    def __init__(
        self, url: str, headers: dict[str, str], tls: ssl.SSLContext | bool, max_connections: int
    ) -> None:
        self._url = url.rstrip("/")
        self._http = httpx.AsyncClient(
            headers={**headers, VERSION_HEADER: PROTOCOL_VERSION_CURRENT},
            verify=tls,
            follow_redirects=False,
            trust_env=False,
            limits=httpx.Limits(max_connections=max_connections),
        )
        self._transport = JsonRpcTransport(self._http, a2a.AgentCard(), self._url)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def card(self, timeout: float) -> a2a.AgentCard:
        """The agent's card (``<url>/.well-known/agent-card.json``)."""
        answer = await self._http.get(self._url + AGENT_CARD_WELL_KNOWN_PATH, timeout=timeout)
        if answer.status_code != 200:
            raise ServiceDown(f"agent card: HTTP {answer.status_code}")
        card = a2a.AgentCard()
        ParseDict(answer.json(), card, ignore_unknown_fields=True)
        return card

    async def send(self, message: a2a.Message, timeout: float) -> Outcome:
        """Send ``message`` and wait (within ``timeout``) until its task ends or asks for
        input; an agent that answers with a message ends the exchange there."""
        until = time.monotonic() + timeout
        request = a2a.SendMessageRequest(message=message)
        response = await self._transport.send_message(request, context=_within(timeout))
        if response.HasField("message"):
            return Outcome(
                message.task_id, "TASK_STATE_COMPLETED", "", _content(response.message.parts)
            )
        if not response.HasField("task"):
            raise RemoteProtocolError(f"{STEP}: SendMessage answered neither a task nor a message")
        task = response.task
        pause = POLL_S
        while a2a.TaskState.Name(task.status.state) not in SETTLED_STATES:
            left = until - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{STEP}: the A2A task {task.id} did not settle in time")
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, MAX_POLL_S)
            task = await self._transport.get_task(
                a2a.GetTaskRequest(id=task.id), context=_within(left)
            )
        return _outcome(task)


def _within(timeout: float) -> ClientCallContext:
    return ClientCallContext(timeout=max(timeout, 0.001))


def _outcome(task: a2a.Task) -> Outcome:
    state = a2a.TaskState.Name(task.status.state)
    text = _text(task.status.message.parts) if task.status.HasField("message") else ""
    parts = [p for artifact in task.artifacts for p in artifact.parts]
    return Outcome(task.id, state, text, _content(parts) if parts else None)


def _text(parts: Any) -> str:
    return "\n".join(p.text for p in parts if p.WhichOneof("content") == "text")


def _content(parts: Any) -> Any:
    """One data part: its value; text parts: their text; several of each: the list."""
    values = []
    for part in parts:
        kind = part.WhichOneof("content")
        if kind == "data":
            values.append(MessageToDict(part.data))
        elif kind == "text":
            values.append(part.text)
        elif kind == "url":
            values.append({"url": part.url, "mediaType": part.media_type})
    if len(values) == 1:
        return values[0]
    if values and all(isinstance(v, str) for v in values):
        return "\n".join(values)
    return values or None


def message(task_id: str, content: Any, *, message_id: str, intent: str) -> a2a.Message:
    """A user message: a data part for JSON, a text part for a string."""
    part = (
        a2a.Part(text=content)
        if isinstance(content, str)
        else a2a.Part(data=ParseDict(content, struct_pb2.Value()), media_type="application/json")
    )
    built = a2a.Message(message_id=message_id, role=a2a.ROLE_USER, task_id=task_id, parts=[part])
    built.metadata.update({"intent": intent})
    return built


def failure(exc: BaseException, mask: Any, by_deadline: bool, timeout: float) -> BaseException:
    """An SDK error as the error the worker acts on (retry, breaker, final)."""
    if isinstance(exc, A2AClientTimeoutError | httpx.TimeoutException):
        if by_deadline:
            return TimeoutError(f"{STEP}: the task's deadline passed during the call")
        return ServiceDown(f"{STEP}: no answer within {timeout:g} s")
    cause = exc.__cause__ if isinstance(exc, A2AClientError) else exc
    if isinstance(cause, httpx.HTTPStatusError):
        answer = cause.response
        return status_error(
            STEP,
            answer.status_code,
            answer.headers.get("retry-after"),
            answer.content,
            mask,
        )
    if isinstance(cause, httpx.ConnectError | httpx.RemoteProtocolError | httpx.ReadError):
        return ServiceUnreachable(f"{STEP}: {hide_addresses(f'{type(cause).__name__}: {cause}')}")
    if isinstance(exc, A2AClientError):
        return RemoteProtocolError(f"{STEP}: {hide_addresses(mask_secrets(str(exc)))[:500]}")
    if isinstance(exc, A2AError):
        said = mask(mask_secrets(str(exc.message)))[:500]
        if isinstance(exc, InternalError):
            return ServiceDown(f"{STEP}: the A2A agent's internal error: {said}")
        if isinstance(exc, InvalidParamsError | InvalidRequestError | ContentTypeNotSupportedError):
            return InvalidInput(f"{STEP}: the A2A agent refused the message: {said}")
        return RemoteRejected(f"{STEP}: the A2A agent refused: {type(exc).__name__}: {said}")
    return exc
