"""Webhooks end to end: real worker, orchestrator and audit writer, and a real HTTP receiver
(aiohttp) that checks each request with ``verify_signature`` as docs/webhooks.md says.

The receiver is down for the first 10 s after the first attempt failed: meanwhile the
exporter's gauge shows the endpoint failing and its backlog; once it is back it gets every
question and result event, each signature verifying."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import orjson
import pytest
from aiohttp import web
from redis.asyncio import Redis

from deepagents.compose import services_for
from deepagents.config import Settings, parse_config
from deepagents.contract.webhooks import (
    EVENT_ID_HEADER,
    SIGNATURE_HEADER,
    WebhookSignatureError,
    signature_header,
    verify_signature,
)
from deepagents.orchestrator import Orchestrator
from deepagents.orchestrator.fleet import FleetSampler
from deepagents.store.webhooks import WebhookQueue
from deepagents.telemetry.metrics import FleetMetrics
from deepagents.transport.keys import Keys
from deepagents.worker import Worker
from tests.audit.support import drained, running_writer
from tests.support.asking import CONFIG, ApprovalAgent
from tests.support.wait import eventually
from tests.support.workers import running

SECRET = "whsec-test-6b1e0c4f2a9d"
OUTAGE_S = 10.0
FINAL = ("succeeded", "failed", "dropped", "expired", "dead_lettered")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def receiver(port: int, got: list[dict[str, Any]]) -> AsyncIterator[None]:
    """A receiver as a user writes one: verify, refuse a bad signature, keep the event."""

    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        try:
            verify_signature(SECRET, body, request.headers.get(SIGNATURE_HEADER))
        except WebhookSignatureError as exc:
            return web.Response(status=401, text=str(exc))
        event = orjson.loads(body)
        assert request.headers[EVENT_ID_HEADER] == event["id"]
        got.append(event)
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield
    finally:
        await runner.cleanup()


async def test_a_receiver_down_for_10_s_gets_every_question_and_result_once_back(
    client: Redis,
    audit_settings: Settings,
    db: asyncpg.Connection,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = _free_port()
    monkeypatch.setenv("DEEPAGENTS_TEST_WEBHOOK_SECRET", SECRET)
    config = parse_config(
        CONFIG
        + f"""
webhooks:
  ops:
    url: http://127.0.0.1:{port}/hook
    secret_env: DEEPAGENTS_TEST_WEBHOOK_SECRET
    agents: [approver, echo]
    retry_base_ms: 200
    retry_max_ms: 1000
"""
    )
    queue = WebhookQueue(client, Keys(audit_settings.prefix))
    fleet = FleetMetrics()
    got: list[dict[str, Any]] = []
    async with (
        Orchestrator.from_client(client, config=config, settings=audit_settings) as orch,
        running(Worker.from_client(ApprovalAgent(), client=client, config=config,
                                   settings=audit_settings)),
        running(Worker.from_client(_echo(), client=client, config=config,
                                   settings=audit_settings)),
        running_writer(client, audit_settings, config) as writer,
    ):  # fmt: skip
        asking = await orch.submit({"intent": "approve", "payload": {"item": "refund"}})

        async def parked() -> bool:
            return await orch.task_state(asking.task_id) == "waiting"

        await eventually(parked, timeout=60, what="the task asks its question")
        await orch.reply(asking.task_id, {"approved": True})
        echoes = [await orch.submit({"intent": "echo", "payload": {"n": i}}) for i in range(2)]
        for handle in (asking, *echoes):
            await handle.result(timeout=60)

        async def failing() -> float:
            (status,) = await queue.statuses(["ops"])
            return status.failing_s()

        await eventually(failing, timeout=60, what="a delivery attempt fails")
        down_since = time.monotonic()
        await drained(writer)
        expected = {
            str(r["event_id"]): r["type"]
            for r in await db.fetch(
                "SELECT event_id, type FROM audit_log WHERE type = 'waiting' OR type = ANY($1)",
                list(FINAL),
            )
        }
        assert sorted(expected.values()) == ["succeeded", "succeeded", "succeeded", "waiting"]

        await asyncio.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_since)))  # the outage
        sampler = FleetSampler(services_for(client, audit_settings), config, fleet)
        await sampler.sample()
        sample = fleet.registry.get_sample_value
        assert (
            sample("deepagents_webhook_failing_seconds", {"endpoint": "ops"}) or 0
        ) >= OUTAGE_S / 2
        assert sample("deepagents_webhook_backlog", {"endpoint": "ops"}) == len(expected)
        assert got == []

        async with receiver(port, got):

            async def all_in() -> bool:
                return {e["id"] for e in got} >= set(expected)

            await eventually(all_in, timeout=60, what="every event delivered after the outage")
            (status,) = await queue.statuses(["ops"])

            async def emptied() -> bool:
                (s,) = await queue.statuses(["ops"])
                return s.backlog == 0

            await eventually(emptied, timeout=30, what="the endpoint's backlog acked")
        await sampler.sample()
        assert sample("deepagents_webhook_failing_seconds", {"endpoint": "ops"}) == 0
        assert sample("deepagents_webhook_backlog", {"endpoint": "ops"}) == 0

    assert {e["id"] for e in got} == set(expected)  # nothing else (no submitted, started...)
    kinds = {e["id"]: e["type"] for e in got}
    assert kinds == {i: "question" if t == "waiting" else "result" for i, t in expected.items()}
    question = next(e for e in got if e["type"] == "question")
    assert question["task_id"] == asking.task_id and question["agent"] == "approver"
    assert "refund" in orjson.dumps(question["event"]).decode()
    assert status.failing_since_ms is None and status.error is None


def test_a_forged_or_replayed_delivery_is_refused() -> None:
    body = b'{"id":"0190","type":"result"}'
    header = signature_header(SECRET, body)
    assert verify_signature(SECRET, body, header) > 0
    forged = [
        (SECRET, body.replace(b"result", b"question"), header),  # body changed
        ("another-secret", body, header),  # signed with another key
        (SECRET, body, header.split(",v1=")[0] + ",v1=" + "0" * 64),  # made-up signature
        (SECRET, body, None),  # no header
        (SECRET, body, "v1=abc"),  # no timestamp
        (SECRET, body, signature_header(SECRET, body, int(time.time()) - 3600)),  # replayed
    ]
    for secret, sent, value in forged:
        with pytest.raises(WebhookSignatureError):
            verify_signature(secret, sent, value)


def _echo() -> Any:
    from agents.echo import EchoAgent

    return EchoAgent()
