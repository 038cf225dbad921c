"""``POST /v1/tasks`` without FastAPI's per-request machinery.

Submit-and-wait is the gateway's hot path. Through FastAPI, every request pays for route
matching over all routes, dependency solving (bearer scheme, state, principal, the
``wait`` query parameter), two exit stacks and the exception middleware: about a fifth
of the gateway's CPU per request. This middleware answers exactly that method and path
itself and does what those layers do for it, in the same order: authenticate (401
first), validate ``wait`` as the declared parameter would (same loc, messages and 422
document), then run the same core as the declared route, turning exceptions into the same
problem documents. The declared route stays: it is what the OpenAPI document describes,
and it serves the request whenever this middleware is not installed.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter, ValidationError
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from deepagents.gateway.auth import authorization
from deepagents.gateway.metrics import GatewayMetrics
from deepagents.gateway.middleware import MetricsMiddleware
from deepagents.gateway.routes_tasks import Wait, submit_one_core
from deepagents.gateway.state import GatewayState

# The declared parameter's own type and constraints, so both paths validate alike.
_WAIT: TypeAdapter[float | None] = TypeAdapter(Wait)


@dataclass(frozen=True, slots=True)
class _Route:
    # What the metrics middleware reads from ``scope["route"]``: the route's template.
    path: str


_SUBMIT_ROUTE = _Route("/v1/tasks")


def is_submit(scope: Scope) -> bool:
    """The request the fast path answers: ``POST /v1/tasks``."""
    return bool(
        scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/v1/tasks"
    )


class SubmitFastPath:
    def __init__(
        self,
        app: ASGIApp,
        on_error: Callable[[Request, Exception], Awaitable[Response]],
    ) -> None:
        self.app = app
        self.on_error = on_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_submit(scope):
            await self.app(scope, receive, send)
            return
        scope["route"] = _SUBMIT_ROUTE
        scope.setdefault("path_params", {})
        request = Request(scope, receive, send)
        try:
            state: GatewayState = scope["app"].state.gateway
            principal = state.auth.authenticate(authorization(request.headers))
            response = await submit_one_core(
                request, state, principal, _wait_in(scope["query_string"])
            )
        except Exception as exc:  # every error becomes a problem document, as in the app
            response = await self.on_error(request, exc)
        await response(scope, receive, send)


class SubmitFront:
    """The served app's front door. ``POST /v1/tasks`` goes to the fast path and the
    request metrics from here, without passing FastAPI's own middleware stack (server
    error, exception telemetry, body limit): 0.42 -> 0.40 ms of gateway CPU per request at
    64 users, medians of five pairs (``loadtests/run_gateway_bench.sh echo 64 20``,
    ``docs/benchmarks.md``). The fast path answers every error itself, as the app would.
    Everything else, the lifespan included, goes to the app, where the same fast path is
    installed as a middleware for whoever embeds ``create_app()`` instead."""

    def __init__(
        self,
        app: ASGIApp,
        metrics: GatewayMetrics,
        on_error: Callable[[Request, Exception], Awaitable[Response]],
    ) -> None:
        self.app = app
        self._submit = MetricsMiddleware(SubmitFastPath(app, on_error), metrics)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if is_submit(scope):
            scope["app"] = self.app  # what the app itself would set: the fast path reads it
            await self._submit(scope, receive, send)
        else:
            await self.app(scope, receive, send)


@functools.lru_cache(maxsize=16)
def _wait_in(query: bytes) -> float | None:
    """``wait`` from the raw query string, read as ``request.query_params`` would. Clients
    send the same few query strings: the last few are remembered (an invalid one raises,
    and is not), so most requests skip the parsing (``docs/benchmarks.md``)."""
    return _wait(QueryParams(query).get("wait"))


def _wait(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        value: float | None = _WAIT.validate_python(raw)
    except ValidationError as exc:
        errors: list[dict[str, Any]] = [
            {**e, "loc": ("query", "wait", *e["loc"])} for e in exc.errors(include_url=False)
        ]
        raise RequestValidationError(errors) from None
    return value
