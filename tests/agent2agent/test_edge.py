"""A2A at the gateway's edge, driven by the ``a2a-sdk``'s own client against a real gateway
process and a real worker process (Redis, the audit outbox on): the card, ``SendMessage``
up to ``input-required``, an answer through the next message (checked against the
question's schema, a second one refused), ``CancelTask``, ``GetTask``, ``SubscribeToTask``;
tenants and keys as on every route; bad A2A input answered with the JSON-RPC error the
protocol names."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, A2AClientError, Client, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as a2a
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict, ParseDict

from deepagents.gateway.auth import hash_key
from tests.gateway.conftest import Deployment, make_deployment
from tests.gateway.procs import KEYS, Gateway, Proc, auth, start_gateway, start_worker
from tests.support.asking import CONFIG

AGENT = "approver"


def _config() -> str:
    keys = "\n".join(
        f"    - {{tenant: {t}, sha256: {hash_key(k)}, name: {t}-test}}" for t, k in KEYS.items()
    )
    return CONFIG + (
        f"gateway:\n  api_keys:\n{keys}\n  a2a: {{enabled: true, default_agent: {AGENT}}}\n"
    )


@pytest.fixture(scope="module")
def deployment(redis_url: str) -> Iterator[Deployment]:
    for d in make_deployment(redis_url, _config()):
        d.env["DEEPAGENTS_OUTBOX"] = "true"
        yield d


@pytest.fixture(scope="module")
def worker(deployment: Deployment) -> Iterator[Proc]:
    with start_worker(deployment.env, "tests.support.asking:ApprovalAgent") as proc:
        yield proc


@pytest.fixture(scope="module")
def gateway(deployment: Deployment, worker: Proc) -> Iterator[Gateway]:
    with start_gateway(deployment.env) as gw:
        yield gw


@contextlib.asynccontextmanager
async def connected(
    gw: Gateway, tenant: str | None = "alpha", *, streaming: bool = False
) -> AsyncIterator[Client]:
    """The SDK's client of the agent, from its card, with the tenant's key (or none)."""
    headers = auth(tenant) if tenant is not None else {}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        card = await A2ACardResolver(http, f"{gw.url}/a2a/{AGENT}").get_agent_card()
        config = ClientConfig(httpx_client=http, streaming=streaming)
        yield ClientFactory(config).create(card)


@pytest.fixture
async def alpha(gateway: Gateway) -> AsyncIterator[Client]:
    async with connected(gateway) as client:
        yield client


def _message(value: Any, task_id: str = "") -> a2a.Message:
    data = ParseDict(value, struct_pb2.Value())
    return a2a.Message(
        message_id=uuid.uuid4().hex,
        role=a2a.ROLE_USER,
        task_id=task_id,
        parts=[a2a.Part(data=data)],
    )


async def _send(client: Client, message: a2a.Message) -> a2a.Task:
    events = [e async for e in client.send_message(a2a.SendMessageRequest(message=message))]
    assert len(events) == 1 and events[0].HasField("task"), events
    return events[0].task


async def _waiting(client: Client, item: str) -> a2a.Task:
    task = await _send(client, _message({"item": item}))
    assert task.status.state == a2a.TASK_STATE_INPUT_REQUIRED, task
    return task


async def test_the_cards_name_the_agent_its_intents_and_the_key_scheme(gateway: Gateway) -> None:
    async with httpx.AsyncClient() as http:
        default = (await http.get(f"{gateway.url}/.well-known/agent-card.json")).json()
        own = (await http.get(f"{gateway.url}/a2a/{AGENT}/.well-known/agent-card.json")).json()
        missing = await http.get(f"{gateway.url}/a2a/nobody/.well-known/agent-card.json")
    assert default == own
    card = ParseDict(own, a2a.AgentCard())
    assert card.name == AGENT and [s.id for s in card.skills] == ["approve"]
    assert card.supported_interfaces[0].url == f"{gateway.url}/a2a/{AGENT}"
    assert card.supported_interfaces[0].protocol_binding == "JSONRPC"
    assert card.capabilities.streaming  # the outbox is on
    assert card.security_schemes["apiKey"].http_auth_security_scheme.scheme == "Bearer"
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"


async def test_input_required_round_trip_through_the_sdk_client(alpha: Client) -> None:
    """SendMessage parks at input-required with the question; a message on the task that
    breaks the answer's schema is refused naming the field; the next one answers it and
    the task completes with the agent's output; a second answer is refused."""
    task = await _waiting(alpha, "order 9")
    question = task.status.message
    assert question.parts[0].text == "approve order 9?"
    schema = MessageToDict(question.metadata)["answerSchema"]
    assert schema["required"] == ["approved"]

    with pytest.raises(InvalidParamsError, match="approved"):
        await _send(alpha, _message({"approved": "maybe"}, task.id))
    done = await _send(alpha, _message({"approved": True, "note": "fine"}, task.id))
    assert done.status.state == a2a.TASK_STATE_COMPLETED, done
    output = MessageToDict(done.artifacts[0].parts[0].data)
    assert output == {"approved": True, "note": "fine"}

    with pytest.raises(UnsupportedOperationError, match="answered already"):
        await _send(alpha, _message({"approved": False}, task.id))
    again = await alpha.get_task(a2a.GetTaskRequest(id=task.id))
    assert again.status.state == a2a.TASK_STATE_COMPLETED


async def test_cancel_task_and_get_task(alpha: Client) -> None:
    task = await _waiting(alpha, "order 10")
    cancelled = await alpha.cancel_task(a2a.CancelTaskRequest(id=task.id))
    assert cancelled.status.state == a2a.TASK_STATE_CANCELED, cancelled
    read = await alpha.get_task(a2a.GetTaskRequest(id=task.id))
    assert read.status.state == a2a.TASK_STATE_CANCELED
    with pytest.raises(UnsupportedOperationError, match="not waiting"):
        await _send(alpha, _message({"approved": True}, task.id))


async def test_subscribe_streams_the_task_s_events_to_its_end(
    gateway: Gateway, alpha: Client
) -> None:
    task = await _waiting(alpha, "order 11")
    events: list[a2a.StreamResponse] = []
    async with connected(gateway, streaming=True) as follower:

        async def follow() -> None:
            async for event in follower.subscribe(a2a.SubscribeToTaskRequest(id=task.id)):
                events.append(event)

        following = asyncio.ensure_future(follow())
        async with asyncio.timeout(60):
            while not events:  # the stream has started: its first item is the task
                await asyncio.sleep(0.02)
            await _send(alpha, _message({"approved": True}, task.id))
            await following
    assert events[0].task.status.state == a2a.TASK_STATE_INPUT_REQUIRED
    types = [
        MessageToDict(e.status_update.metadata)["event"]["type"]
        for e in events[1:]
        if e.HasField("status_update")
    ]
    assert "replied" in types and types[-1] == "succeeded", types
    assert events[-1].status_update.status.state == a2a.TASK_STATE_COMPLETED
    artifacts = [e for e in events if e.HasField("artifact_update")]
    assert MessageToDict(artifacts[0].artifact_update.artifact.parts[0].data)["approved"] is True


async def test_a_streamed_message_ends_at_the_question_and_its_answer_at_the_result(
    gateway: Gateway,
) -> None:
    """SendStreamingMessage (what the SDK's client sends when the card says streaming):
    the stream of the first message ends at input-required, the answer's at the end."""
    async with connected(gateway, streaming=True) as client:
        request = a2a.SendMessageRequest(message=_message({"item": "order 13"}))
        asked = [e async for e in client.send_message(request)]
        status = _last_status(asked)
        task_id = asked[0].task.id
        assert status.state == a2a.TASK_STATE_INPUT_REQUIRED, asked
        assert status.message.parts[0].text == "approve order 13?"
        answer = a2a.SendMessageRequest(message=_message({"approved": False}, task_id))
        done = [e async for e in client.send_message(answer)]
    kinds = [
        MessageToDict(e.status_update.metadata)["event"]["type"]
        for e in done
        if e.HasField("status_update")
    ]
    assert "waiting" not in kinds, kinds  # nothing from before the answer
    assert _last_status(done).state == a2a.TASK_STATE_COMPLETED, done


def _last_status(events: list[a2a.StreamResponse]) -> a2a.TaskStatus:
    """The status the stream ended with: its last status update, or the task itself when
    the task had settled before the gateway first read it (a fast worker)."""
    last = events[-1]
    return last.status_update.status if last.HasField("status_update") else last.task.status


async def test_another_tenant_s_task_is_not_found_and_no_key_is_refused(
    gateway: Gateway, alpha: Client
) -> None:
    task = await _waiting(alpha, "order 12")
    async with connected(gateway, "beta") as beta:
        with pytest.raises(TaskNotFoundError):
            await beta.get_task(a2a.GetTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await beta.cancel_task(a2a.CancelTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await _send(beta, _message({"approved": True}, task.id))
    async with connected(gateway, None) as anonymous:
        with pytest.raises(A2AClientError, match="401"):
            await anonymous.get_task(a2a.GetTaskRequest(id=task.id))
    await alpha.cancel_task(a2a.CancelTaskRequest(id=task.id))


def _rpc(method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}


_PART = {"messageId": "m1", "role": "ROLE_USER"}


@pytest.mark.parametrize(
    ("body", "code", "says"),
    [
        (b'{"jsonrpc": "2.0", "id": 7, "method": ', -32700, "JSON"),
        (b'{"jsonrpc": "2.0", "id": 7, "id": 8, "method": "GetTask"}', -32700, "appears twice"),
        (_rpc("Nope", {}), -32601, "SendMessage"),
        ({"jsonrpc": "1.0", "id": 7, "method": "GetTask"}, -32600, "2.0"),
        (_rpc("GetTask", {"id": 5}), -32602, "params"),
        (_rpc("GetTask", {"id": "no/such"}), -32602, "task id"),
        (_rpc("GetTask", {"id": "nosuchtask"}), -32001, "no task"),
        (_rpc("SendMessage", {"message": {**_PART, "parts": []}}), -32602, "empty"),
        (
            _rpc("SendMessage", {"message": {**_PART, "parts": [{"url": "http://x/y"}]}}),
            -32005,
            "only data and text",
        ),
        (
            _rpc(
                "SendMessage",
                {"message": {**_PART, "parts": [{"text": "hi"}], "metadata": {"intent": "x"}}},
            ),
            -32602,
            "serves approve",
        ),
        (_rpc("ListTasks", {}), -32004, "ListTasks"),
        (_rpc("GetTaskPushNotificationConfig", {"taskId": "t"}), -32003, "SubscribeToTask"),
        (_rpc("SendMessage", {"tenant": "beta", "message": _PART}), -32602, "tenant"),
    ],
)
async def test_bad_input_is_the_json_rpc_error_the_protocol_names(
    gateway: Gateway, body: Any, code: int, says: str
) -> None:
    async with httpx.AsyncClient(headers=auth()) as http:
        url = f"{gateway.url}/a2a/{AGENT}"
        if isinstance(body, bytes):
            r = await http.post(url, content=body, headers={"content-type": "application/json"})
        else:
            r = await http.post(url, json=body)
    assert r.status_code == 200, r.text
    error = r.json()["error"]
    assert error["code"] == code and says in error["message"], error
    assert "\n" not in error["message"]


async def test_another_major_version_of_a2a_is_refused(gateway: Gateway) -> None:
    async with httpx.AsyncClient(headers={**auth(), "A2A-Version": "0.3"}) as http:
        r = await http.post(f"{gateway.url}/a2a/{AGENT}", json=_rpc("GetTask", {"id": "x"}))
    error = r.json()["error"]
    assert error["code"] == -32009 and "1.0" in error["message"], error
