"""Issue 16, finding 4: the unauthenticated ``/health?full=true`` cannot fill Redis.

Each call submitted a probe task, whose hash stayed a day and whose location record eight:
300 calls in half a second left 300 of each. Now a process answers its last report for
``probe_cache_s`` (one probe per window, however often it is called), and a finished
probe's records expire in minutes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from deepagents.gateway.health import PROBE_TTL_S
from tests.gateway.conftest import Deployment, make_deployment
from tests.gateway.procs import Gateway, Proc, config_yaml, start_gateway, start_worker
from tests.support.wait import eventually_sync

PROBE = "deepagents.gateway.probe:ProbeAgent"
CACHE_S = 2.0


@pytest.fixture(scope="module")
def deployment(redis_url: str) -> Iterator[Deployment]:
    text = config_yaml().replace(
        "  probe_timeout_s:", f"  probe_cache_s: {CACHE_S}\n  probe_timeout_s:"
    )
    yield from make_deployment(redis_url, text)


@pytest.fixture(scope="module")
def gateway(deployment: Deployment) -> Iterator[Gateway]:
    with start_gateway(deployment.env) as gw:
        yield gw


@pytest.fixture(scope="module")
def probe_worker(deployment: Deployment) -> Iterator[Proc]:
    with start_worker(deployment.env, PROBE) as proc:
        yield proc


def _probe_records(deployment: Deployment) -> dict[str, int]:
    """Each probe task's hash and location key, with its TTL in seconds."""
    redis, prefix = deployment.redis, deployment.prefix
    keys = [*redis.scan_iter(match=f"{prefix}:{{probe:*}}:t:*", count=1000)]
    ids = [k.decode().rsplit(":", 1)[-1] for k in keys]
    keys += [f"{prefix}:loc:{i}".encode() for i in ids]
    return {k.decode(): int(redis.ttl(k)) for k in keys}


def test_a_flood_of_full_checks_runs_one_probe_per_window(
    gateway: Gateway, deployment: Deployment, probe_worker: Proc
) -> None:
    with httpx.Client(base_url=gateway.url, timeout=15) as http:
        eventually_sync(
            lambda: http.get("/health?full=true").status_code == 200,
            timeout=30,
            interval=0.2,
            what="full health green with a probe worker",
        )
        start = time.monotonic()
        codes = {http.get("/health?full=true").status_code for _ in range(300)}
        took = time.monotonic() - start
    assert codes == {200}
    records = _probe_records(deployment)
    probes = len(records) // 2
    windows = int(took // CACHE_S) + 1
    # The calls that turned green first, and at most one per window since.
    assert probes <= windows + 2, f"{probes} probe tasks for 300 calls in {took:.1f} s"
    assert all(0 < ttl <= PROBE_TTL_S for ttl in records.values()), records
