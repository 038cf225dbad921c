"""``deepagents gateway --workers N``: several processes, one view of the metrics."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.gateway.conftest import Deployment
from tests.gateway.procs import Gateway, auth, start_gateway
from tests.telemetry.support import promtool_check_metrics, samples

REQUESTS = 60
SUBMITTED = 'deepagents_gateway_requests_total{method="POST",route="/v1/tasks",status="202"}'


@pytest.fixture(scope="module")
def gateways(deployment: Deployment) -> Iterator[Gateway]:
    with start_gateway(deployment.env, "--workers", "2") as gw:
        yield gw


def _submitted(text: str) -> float:
    return sum(
        value
        for labels, value in samples(text).get("deepagents_gateway_requests_total", [])
        if labels == {"method": "POST", "route": "/v1/tasks", "status": "202"}
    )


def test_every_scrape_counts_the_requests_of_every_process(gateways: Gateway) -> None:
    for i in range(REQUESTS):
        # A new connection each time: the processes take turns accepting them.
        r = httpx.post(
            gateways.url + "/v1/tasks", json={"intent": "echo", "payload": {"i": i}},
            headers=auth(), timeout=15,
        )  # fmt: skip
        assert r.status_code == 202, r.text
    scrapes = [httpx.get(gateways.url + "/metrics", timeout=15).text for _ in range(8)]
    # One process alone would count only the requests it served: about half of them.
    assert [_submitted(text) for text in scrapes] == [REQUESTS] * len(scrapes)
    promtool_check_metrics(scrapes[0])


def test_the_metrics_directory_goes_with_the_gateway(deployment: Deployment) -> None:
    gw = start_gateway(deployment.env, "--workers", "2")
    try:
        assert gw.process is not None
        pid = gw.process.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        dirs = {d for d in map(_metrics_dir, children) if d is not None}
        (path,) = dirs  # one directory, shared by the worker processes
        assert path.is_dir()
    finally:
        gw.stop()
    assert not path.exists()


def _metrics_dir(pid: str) -> Path | None:
    for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        if item.startswith(b"PROMETHEUS_MULTIPROC_DIR="):
            return Path(item.split(b"=", 1)[1].decode())
    return None
