"""The published protocol: the schema file is the wire module's, the adapter's requests and
the reference agents' answers conform to it."""

from __future__ import annotations

import contextlib
import json
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import jsonschema

from deepagents.contract import Task
from deepagents.contract.task import utcnow
from deepagents.errors import DeepAgentsError
from deepagents.remote.wire import STEPS, json_schema
from deepagents.worker.agent_calls import AgentRunner
from tests.remote.conftest import Service, StartNode
from tests.remote.test_reference_agents import orders, remote

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "remote-agents.schema.json"


def check(schema: dict[str, Any], message: str, instance: Any) -> None:
    document = {"$ref": f"#/$defs/{message}", "$defs": schema["$defs"]}
    jsonschema.Draft202012Validator(document).validate(instance)


def test_the_committed_schema_is_the_wire_modules() -> None:
    assert json.loads(SCHEMA_FILE.read_text()) == json_schema()


async def requests_sent(service: Service) -> list[dict[str, Any]]:
    """Runs tasks (valid and invalid orders, with and without a deadline) through the
    adapter; returns the requests the service logged."""
    agent = remote(service.url)
    with ThreadPoolExecutor(2) as pool:
        runner = AgentRunner(agent, pool)
        for i, payload in enumerate(orders()[::5]):
            extra: dict[str, Any] = {
                "tenant": "acme",
                "traceparent": f"00-{'a' * 32}-{'b' * 16}-01",
                "deadline": utcnow() + timedelta(seconds=30),
            }
            task = Task(intent="risk_check", payload=payload, **(extra if i % 2 else {}))
            with contextlib.suppress(DeepAgentsError):  # an invalid order: still sent
                await runner.run(task)
    await agent.aclose()
    return service.calls()


async def test_the_adapters_requests_conform_to_the_schema(node_agent: StartNode) -> None:
    service = node_agent()
    calls = await requests_sent(service)
    schema = json.loads(SCHEMA_FILE.read_text())
    assert {c["step"] for c in calls} == set(STEPS)
    assert any(c["body"]["time_left_ms"] is not None for c in calls)
    for call in calls:
        check(schema, f"{call['step']}_request", call["body"])


async def test_the_reference_agents_answers_conform_to_the_schema(
    node_agent: StartNode, python_agent: Service
) -> None:
    schema = json.loads(SCHEMA_FILE.read_text())
    logger = node_agent()
    calls = await requests_sent(logger)
    for service in (logger, python_agent):
        with httpx.Client(base_url=service.url, timeout=10) as http:
            health = http.get("/v1/health")
            assert health.status_code == 200
            check(schema, "health_response", health.json())
            answered = 0
            for call in calls:
                response = http.post(f"/v1/{call['step']}", json=call["body"])
                if response.status_code == 200:
                    assert response.headers["content-type"].startswith("application/json")
                    check(schema, f"{call['step']}_response", response.json())
                    answered += 1
                else:
                    assert response.status_code == 422, response.text
                    check(schema, "problem", response.json())
            assert answered > len(calls) // 2
