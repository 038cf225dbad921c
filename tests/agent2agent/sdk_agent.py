"""An A2A agent served by the ``a2a-sdk``'s own server (its request handler, task store and
JSON-RPC routes, on uvicorn), for the client adapter's tests. Run as
``python -m tests.agent2agent.sdk_agent PORT``.

What it does with a task's data part:
- ``{"ask": true, ...}``: asks "which currency?" (input-required); the answer's text ends the
  task with ``{"amount": ..., "currency": <answer>}``;
- ``{"fail": "why"}``: fails the task with that text;
- anything else: completes with ``{"echo": <the data>, "intent": <metadata.intent>}``.
"""

from __future__ import annotations

import sys
from typing import Any

import uvicorn
from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import a2a_pb2 as a2a
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict, ParseDict
from starlette.applications import Starlette

VERSION = "4.2.0"


def card(url: str) -> a2a.AgentCard:
    return a2a.AgentCard(
        name="sdk-risk",
        description="an A2A agent on the SDK's own server",
        version=VERSION,
        supported_interfaces=[
            a2a.AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=a2a.AgentCapabilities(streaming=False),
        default_input_modes=["application/json"],
        default_output_modes=["application/json"],
        skills=[a2a.AgentSkill(id="risk", name="risk", description="echo, ask or fail")],
    )


def _data(message: a2a.Message) -> Any:
    for part in message.parts:
        if part.WhichOneof("content") == "data":
            return MessageToDict(part.data)
        if part.WhichOneof("content") == "text":
            return part.text
    return None


def _value(value: Any) -> a2a.Part:
    return a2a.Part(data=ParseDict(value, struct_pb2.Value()))


class RiskExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        assert message is not None
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        first = _data(task.history[0]) if task.history else _data(message)
        if context.current_task is not None and isinstance(first, dict) and first.get("ask"):
            currency = _data(message)
            await updater.add_artifact(
                [_value({"amount": first.get("amount"), "currency": currency})]
            )
            await updater.complete()
            return
        data = _data(message)
        if isinstance(data, dict) and data.get("ask"):
            question = updater.new_agent_message([a2a.Part(text="which currency?")])
            await updater.requires_input(question)
            return
        if isinstance(data, dict) and data.get("fail"):
            reason = updater.new_agent_message([a2a.Part(text=str(data["fail"]))])
            await updater.failed(reason)
            return
        intent = MessageToDict(message.metadata).get("intent")
        await updater.add_artifact([_value({"echo": data, "intent": intent})])
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is not None:
            await TaskUpdater(event_queue, task.id, task.context_id).cancel()


def app(port: int) -> Starlette:
    agent_card = card(f"http://127.0.0.1:{port}/")
    handler = DefaultRequestHandler(
        agent_executor=RiskExecutor(), task_store=InMemoryTaskStore(), agent_card=agent_card
    )
    routes = create_agent_card_routes(agent_card) + create_jsonrpc_routes(handler, rpc_url="/")
    return Starlette(routes=routes)


if __name__ == "__main__":
    port = int(sys.argv[1])
    uvicorn.run(app(port), host="127.0.0.1", port=port, log_level="warning")
