"""A worker's ``/healthz`` and ``/readyz`` beside its ``/metrics`` (the probes of its
container's HEALTHCHECK and of its Kubernetes Deployment)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis

from agents.echo import EchoAgent
from deepagents._internal.redis_server import free_port
from deepagents.config import Settings, load_config
from deepagents.telemetry.core import Telemetry
from deepagents.telemetry.metrics import Metrics
from deepagents.telemetry.serve import Server, serve_metrics, stop_server
from deepagents.worker import Worker
from deepagents.worker.probes import WorkerProbes
from tests.support.wait import eventually, eventually_sync

CONFIG = """
tiers:
  p0: {concurrency: 4, max_wait_ms: 60000}
default_tier: p0
defaults: {shards: 1, visibility_timeout_ms: 3000, heartbeat_ms: 100, block_ms: 100,
           grace_period_s: 1}
agents:
  echo: {class: "agents.echo:EchoAgent"}
"""


@pytest.fixture
def served() -> Iterator[tuple[WorkerProbes, str, Telemetry]]:
    probes, telemetry, port = WorkerProbes(), Telemetry(metrics=Metrics()), free_port()
    server: Server | None = serve_metrics(telemetry, port, "127.0.0.1", probes.probes())
    assert server is not None
    try:
        yield probes, f"http://127.0.0.1:{port}", telemetry
    finally:
        stop_server(server)


def _status(url: str) -> int:
    return httpx.get(url, timeout=5).status_code


async def test_a_worker_is_ready_once_reading_and_alive_while_its_loop_turns(
    client: Redis, settings: Settings, tmp_path: Path, served: tuple[WorkerProbes, str, Telemetry]
) -> None:
    probes, base, telemetry = served
    path = tmp_path / "deepagents.yaml"
    path.write_text(CONFIG)
    config = load_config(path)
    worker = Worker.from_client(
        EchoAgent(), client=client, config=config, settings=settings, telemetry=telemetry
    )
    # Before the worker exists: the process is starting, alive and not ready.
    assert (_status(f"{base}/healthz"), _status(f"{base}/readyz")) == (200, 503)
    probes.worker = worker
    run = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.ready.wait(), 30)

        async def ready() -> bool:
            return await asyncio.to_thread(_status, f"{base}/readyz") == 200

        await eventually(ready, timeout=10, what="/readyz 200")
        assert _status(f"{base}/healthz") == 200
        assert _status(f"{base}/metrics") == 200
        # A blocked event loop: the heartbeat cannot turn, so the worker is not alive (this
        # thread blocks the loop while it polls the server's thread).
        eventually_sync(lambda: _status(f"{base}/healthz") == 503, timeout=10, what="503")
        # Once the loop runs again, the next heartbeat makes it alive.
        await eventually(
            lambda: asyncio.to_thread(lambda: _status(f"{base}/healthz") == 200),
            timeout=10,
            what="/healthz 200 again",
        )
        worker.stop()
        await asyncio.wait_for(run, 30)
        assert _status(f"{base}/readyz") == 503  # stopped: takes no more work
    finally:
        worker.stop()
        await asyncio.wait_for(run, 30)
