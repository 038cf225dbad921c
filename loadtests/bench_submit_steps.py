"""CPU per submit, step by step, in this process (no Redis): what validation costs beside
routing, encoding and the audit event, and which of it repeats per task.

    .venv/bin/python loadtests/bench_submit_steps.py

Each figure is the best of 7 repeats of 20,000 calls (the minimum filters out the other
processes of a shared machine), in µs per call.
"""

from __future__ import annotations

import timeit
from collections.abc import Callable
from typing import Any

from deepagents.compose import memory_services
from deepagents.config import Settings, parse_config
from deepagents.contract import Task
from deepagents.contract.codec import encode_task
from deepagents.contract.events import AuditEvent
from deepagents.gateway.schemas import SubmitRequest
from deepagents.orchestrator import Orchestrator
from deepagents.transport.outbox import encode_events

CONFIG = """
defaults: {shards: 4, max_backlog: 10000000}
agents: {echo: {class: "agents.echo:EchoAgent"}}
"""
RAW: dict[str, Any] = {"intent": "echo", "payload": {"i": 1, "text": "hello"}}
N = 20_000


def us(fn: Callable[[], object]) -> float:
    return round(min(timeit.repeat(fn, number=N, repeat=7)) / N * 1e6, 2)


def main() -> None:
    settings = Settings(prefix="steps", outbox=True)
    orch = Orchestrator(memory_services(settings), config=parse_config(CONFIG), settings=settings)
    task = Task.model_validate(RAW)
    route = orch.router.route(task)
    request = SubmitRequest.model_validate(RAW)
    rows = {
        "Task.model_validate(mapping)  (Orchestrator.submit of a dict)": lambda: (
            Task.model_validate(RAW)
        ),
        "Task(**fields)  (a Task built by the caller)": lambda: Task(**RAW),
        "SubmitRequest.model_validate  (gateway body)": lambda: SubmitRequest.model_validate(RAW),
        "Task(**request.model_dump(), tenant)  (gateway: validated again)": lambda: Task(
            **request.model_dump(exclude_none=True), tenant="t"
        ),
        "Task.model_construct(**request.model_dump(), tenant)  (not validated again)": lambda: (
            Task.model_construct(**request.model_dump(exclude_none=True), tenant="t")
        ),
        "router.route(task)": lambda: orch.router.route(task),
        "encode_task(task)": lambda: encode_task(task),
        "submitted audit event, encoded": lambda: encode_events(
            [AuditEvent.of("submitted", task.task_id, agent=route.agent, payload=task.payload)]
        ),
        "Submitter._prepare(task)  (validate-free: route, encode, size check)": lambda: (
            orch.submits._prepare(task)
        ),
        "Submitter._prepare(mapping)  (validate, route, encode, size check)": lambda: (
            orch.submits._prepare(RAW)
        ),
    }
    for name, fn in rows.items():
        print(f"{us(fn):8.2f} µs  {name}")


if __name__ == "__main__":
    main()
