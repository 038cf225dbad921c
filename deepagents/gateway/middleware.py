"""Request metrics as a plain ASGI middleware (BaseHTTPMiddleware costs a task per request)."""

from __future__ import annotations

import time
from collections.abc import MutableMapping
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from deepagents.gateway.metrics import GatewayMetrics


class MetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics
        self._counts: dict[tuple[str, str, int], Any] = {}
        self._latencies: dict[str, Any] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def observe(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, observe)
        finally:
            route = _route(scope)
            self._count(route, scope["method"], status).inc()
            self._latency(route).observe(time.perf_counter() - start)

    # The labelled children, kept: ``labels()`` checks and joins its labels on every call
    # (``docs/benchmarks.md``). The keys are the
    # metrics' own label sets, so this holds no more entries than they do.
    def _count(self, route: str, method: str, status: int) -> Any:
        key = (route, method, status)
        child = self._counts.get(key)
        if child is None:
            child = self._counts[key] = self.metrics.requests.labels(route, method, str(status))
        return child

    def _latency(self, route: str) -> Any:
        child = self._latencies.get(route)
        if child is None:
            child = self._latencies[route] = self.metrics.latency.labels(route)
        return child


def _route(scope: MutableMapping[str, Any]) -> str:
    # The template (/v1/tasks/{task_id}), never the raw path: ids would explode cardinality.
    route = scope.get("route")
    path = getattr(route, "path", None)
    return str(path) if path else "unmatched"
