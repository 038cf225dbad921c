"""Serve a registry on ``/metrics`` from a daemon thread (prometheus_client's server).

A worker also answers ``/healthz`` (alive) and ``/readyz`` (ready for work) there, so an
orchestrator's probes and Prometheus's scrapes share one port.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, Protocol
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app, start_http_server
from prometheus_client.exposition import ThreadingWSGIServer

from deepagents.errors import ConfigError
from deepagents.telemetry.core import Telemetry

log = logging.getLogger("deepagents.telemetry")

_WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class Server(Protocol):
    def shutdown(self) -> None: ...

    def server_close(self) -> None: ...


def stop_server(server: Server) -> None:
    """Stop serving, then close the listening socket (``shutdown`` alone leaves it open)."""
    server.shutdown()
    server.server_close()


class Probes(NamedTuple):
    """The answers of ``/healthz`` and ``/readyz``; called on the server's thread."""

    live: Callable[[], bool]
    ready: Callable[[], bool]


def serve_registry(
    registry: CollectorRegistry,
    port: int,
    addr: str = "0.0.0.0",  # noqa: S104 - scraped from other hosts
    probes: Probes | None = None,
) -> Server:
    if probes is None:
        server, _ = start_http_server(port, addr=addr, registry=registry)
    else:
        server = _serve_with_probes(registry, port, addr, probes)
    log.info(
        "serving /metrics on %s port %d",
        addr,
        server.server_port,
        extra={"port": server.server_port},
    )
    return server


def serve_metrics(
    telemetry: Telemetry, port: int | None, host: str, probes: Probes | None = None
) -> Server | None:
    """Serve this process's metrics on ``host`` when a port is set and metrics are on."""
    if port is None or telemetry.metrics is None:
        return None
    if not host:  # the HTTP server would take "" for every address
        raise ConfigError("the /metrics host is empty", field="metrics_host")
    try:
        return serve_registry(telemetry.metrics.registry, port, host, probes)
    except OSError as exc:  # a name that does not resolve, an address not ours, a port in use
        raise ConfigError(f"cannot serve /metrics on {host} port {port}: {exc}") from exc


def _serve_with_probes(
    registry: CollectorRegistry, port: int, addr: str, probes: Probes
) -> ThreadingWSGIServer:
    class _Server(ThreadingWSGIServer):  # IPv4 or IPv6, as the address is
        address_family = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)[0][0]

    app = with_probes(make_wsgi_app(registry), probes)
    server = make_server(addr, port, app, _Server, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


def with_probes(app: _WSGIApp, probes: Probes) -> _WSGIApp:
    """``app`` with ``/healthz`` and ``/readyz`` in front: 200 when the check holds, else 503."""
    checks = {"/healthz": probes.live, "/readyz": probes.ready}

    def route(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        check = checks.get(environ.get("PATH_INFO", ""))
        if check is None:
            return app(environ, start_response)
        ok = check()
        status = "200 OK" if ok else "503 Service Unavailable"
        start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
        return [b"ok\n" if ok else b"unavailable\n"]

    return route


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # a probe every few seconds
        pass
