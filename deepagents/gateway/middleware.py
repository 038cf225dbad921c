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
            self.metrics.requests.labels(route, scope["method"], str(status)).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - start)


def _route(scope: MutableMapping[str, Any]) -> str:
    # The template (/v1/tasks/{task_id}), never the raw path: ids would explode cardinality.
    route = scope.get("route")
    path = getattr(route, "path", None)
    return str(path) if path else "unmatched"
