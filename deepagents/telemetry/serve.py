"""Serve a registry on ``/metrics`` from a daemon thread (prometheus_client's server)."""

from __future__ import annotations

import logging
from typing import Protocol

from prometheus_client import CollectorRegistry, start_http_server

from deepagents.errors import ConfigError
from deepagents.telemetry.core import Telemetry

log = logging.getLogger("deepagents.telemetry")


class Server(Protocol):
    def shutdown(self) -> None: ...


def serve_registry(registry: CollectorRegistry, port: int, addr: str = "0.0.0.0") -> Server:  # noqa: S104 - scraped from other hosts
    server, _ = start_http_server(port, addr=addr, registry=registry)
    log.info(
        "serving /metrics on %s port %d",
        addr,
        server.server_port,
        extra={"port": server.server_port},
    )
    return server


def serve_metrics(telemetry: Telemetry, port: int | None, host: str) -> Server | None:
    """Serve this process's metrics on ``host`` when a port is set and metrics are on."""
    if port is None or telemetry.metrics is None:
        return None
    if not host:  # the HTTP server would take "" for every address
        raise ConfigError("the /metrics host is empty", field="metrics_host")
    try:
        return serve_registry(telemetry.metrics.registry, port, host)
    except OSError as exc:  # a name that does not resolve, an address not ours, a port in use
        raise ConfigError(f"cannot serve /metrics on {host} port {port}: {exc}") from exc
