"""Serve a registry on ``/metrics`` from a daemon thread (prometheus_client's server)."""

from __future__ import annotations

import logging
from typing import Protocol

from prometheus_client import CollectorRegistry, start_http_server

from deepagents.telemetry.core import Telemetry

log = logging.getLogger("deepagents.telemetry")


class Server(Protocol):
    def shutdown(self) -> None: ...


def serve_registry(registry: CollectorRegistry, port: int, addr: str = "0.0.0.0") -> Server:  # noqa: S104 - scraped from other hosts
    server, _ = start_http_server(port, addr=addr, registry=registry)
    log.info("serving /metrics on port %d", server.server_port, extra={"port": server.server_port})
    return server


def serve_metrics(telemetry: Telemetry, port: int | None) -> Server | None:
    """Serve this process's metrics when a port is set and metrics are on."""
    if port is None or telemetry.metrics is None:
        return None
    return serve_registry(telemetry.metrics.registry, port)
