"""The gateway's ASGI app. ``create_app()`` is the factory uvicorn runs (``--factory``).

The lifespan owns the Redis client and the Orchestrator: both are created on startup
in the server's event loop (a redis-py client is bound to the loop it first runs in)
and closed on shutdown.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp

from deepagents._internal.extras import require_extra
from deepagents._internal.heap import freeze_startup_heap
from deepagents.compose import open_services
from deepagents.config.load import load_settings, load_settings_config
from deepagents.config.schema import FileConfig
from deepagents.config.settings import Settings
from deepagents.contract.codec import DamagedRecord
from deepagents.errors import ConfigError, DeepAgentsError, ErrorCode
from deepagents.gateway.apidoc import build_openapi
from deepagents.gateway.auth import Authenticator, MetricsGuard
from deepagents.gateway.fastpath import SubmitFastPath, SubmitFront
from deepagents.gateway.health import FullCheck
from deepagents.gateway.http import (
    HEADER_LIMITS_KEY,
    HEADER_TIMEOUT_KEY,
    HeaderDeadline,
    HeaderLimits,
)
from deepagents.gateway.limits import Admission
from deepagents.gateway.metrics import GatewayMetrics
from deepagents.gateway.middleware import MetricsMiddleware
from deepagents.gateway.probe import ProbeAgent
from deepagents.gateway.problems import FieldError, Problem, problem_response
from deepagents.gateway.reload import reload_on_hangup
from deepagents.gateway.routes_console import router as console_router
from deepagents.gateway.routes_docs import router as docs_router
from deepagents.gateway.routes_events import router as events_router
from deepagents.gateway.routes_ops import agents_router
from deepagents.gateway.routes_ops import router as ops_router
from deepagents.gateway.routes_replies import router as replies_router
from deepagents.gateway.routes_tasks import router as tasks_router
from deepagents.gateway.state import GatewayState
from deepagents.orchestrator import Orchestrator
from deepagents.store.tenant_limits import TenantLimiter

log = logging.getLogger("deepagents.gateway")

TITLE = "deepagents gateway"
VERSION = "1.0.0"


def create_served_app(on_ready: Callable[[], None] | None = None) -> ASGIApp:
    """The app as ``deepagents gateway`` serves it: the process is the app's alone, so its
    start-up heap is frozen once the lifespan is up (see ``freeze_startup_heap``), and
    ``POST /v1/tasks`` enters through ``SubmitFront``.

    A bad config file ends the process with one line, not a traceback: with ``--workers``,
    each process started by a ``SIGHUP`` reads the file again (``reload.py``)."""
    try:
        app = create_app(freeze_heap=True, on_ready=on_ready)
    except ConfigError as exc:
        log.error("cannot start: %s", exc, extra={"action": "config_error"})
        raise SystemExit(2) from None
    return SubmitFront(app, app.state.request_metrics, exception_response)


def create_app(
    settings: Settings | None = None,
    config: FileConfig | None = None,
    *,
    freeze_heap: bool = False,
    on_ready: Callable[[], None] | None = None,
) -> FastAPI:
    """The app; settings and config default to the environment (DEEPAGENTS_*) and its file.
    ``on_ready`` is called once the lifespan has started (Redis checked, state built)."""
    settings = settings or load_settings()
    config = config or load_settings_config(settings)
    metrics = GatewayMetrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, HeaderDeadline | HeaderLimits]]:
        if settings.redis_url is None:
            raise ConfigError("DEEPAGENTS_REDIS_URL is not set", file="environment")
        services = open_services(settings, max_connections=256)
        try:
            await services.bus.check_server()
            async with Orchestrator(
                services, config=config, settings=settings, agents=[ProbeAgent]
            ) as orchestrator:
                if services.client is None:  # open_services always opens one
                    raise ConfigError("the gateway needs Redis")
                limiter = TenantLimiter(services.client, settings.prefix)
                admission = Admission(limiter, config.gateway)
                app.state.gateway = GatewayState(
                    settings=settings,
                    config=config,
                    services=services,
                    orchestrator=orchestrator,
                    auth=Authenticator(config.gateway.api_keys),
                    metrics_guard=MetricsGuard(config.gateway.metrics_keys),
                    admission=admission,
                    registry=services.registry,
                    full_check=FullCheck(
                        orchestrator,
                        config.gateway.probe_timeout_s,
                        config.gateway.probe_cache_s,
                        services.registry,
                    ),
                    metrics=metrics,
                    header_deadline=HeaderDeadline(config.gateway.header_timeout_s),
                    header_limits=HeaderLimits(
                        config.gateway.max_header_field_bytes, config.gateway.max_header_bytes
                    ),
                )
                if not config.gateway.api_keys:
                    log.warning("no gateway.api_keys configured: every /v1 request answers 401")
                if freeze_heap:
                    freeze_startup_heap()
                if on_ready is not None:
                    on_ready()
                try:
                    with reload_on_hangup(app.state.gateway, settings.config_path(), metrics):
                        # uvicorn hands this state to every connection (``http.py``).
                        yield {
                            HEADER_TIMEOUT_KEY: app.state.gateway.header_deadline,
                            HEADER_LIMITS_KEY: app.state.gateway.header_limits,
                        }
                finally:
                    app.state.gateway.parser.shutdown(wait=False, cancel_futures=True)
                    if app.state.gateway.events is not None:
                        await app.state.gateway.events.aclose()
                    await admission.aclose()
        finally:
            await services.aclose()

    app = FastAPI(
        title=TITLE,
        version=VERSION,
        lifespan=lifespan,
        # A redirect to the same path without its slash would be built from the request's
        # Host header: an open redirect to wherever the client names.
        redirect_slashes=False,
        # FastAPI's Swagger and ReDoc pages load their assets from a CDN: ``routes_docs``
        # serves the reference from this host alone.
        docs_url=None,
        redoc_url=None,
        description="Submit tasks to deepagents over HTTP. Errors are RFC 9457 "
        "problem documents with a stable `type` per `code`.",
    )
    app.state.request_metrics = metrics  # for SubmitFront, which is outside the app
    app.include_router(tasks_router)
    app.include_router(events_router)
    app.include_router(console_router)
    app.include_router(docs_router)
    app.include_router(replies_router)
    app.include_router(agents_router)
    app.include_router(ops_router)
    if config.gateway.a2a.enabled:
        _mount_a2a(app, config)
    _install_handlers(app)
    # Inside the metrics middleware (added later = further out), so it is measured too.
    app.add_middleware(SubmitFastPath, on_error=exception_response)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.openapi = lambda: build_openapi(app)  # type: ignore[method-assign]
    return app


def _mount_a2a(app: FastAPI, config: FileConfig) -> None:
    """A2A at the edge (``a2a_edge.py``): the SDK is imported here, and only when enabled."""
    require_extra("a2a", "gateway.a2a.enabled")
    from deepagents.gateway.a2a_edge import mount

    mount(app, config.gateway.a2a.default_agent, list(config.agents))


def _install_handlers(app: FastAPI) -> None:
    for exc_class in _HANDLED:
        app.add_exception_handler(exc_class, exception_response)


async def exception_response(request: Request, exc: Exception) -> Response:
    """The problem document for an exception: what the app's exception handlers answer
    (and what the fast path answers, which runs outside them)."""
    if isinstance(exc, Problem):
        return problem_response(exc, request)
    if isinstance(exc, RequestValidationError):
        errors = [
            FieldError(field=".".join(str(p) for p in e["loc"]), message=str(e["msg"]))
            for e in exc.errors()[:20]
        ]
        detail = f"{errors[0].field}: {errors[0].message}" if errors else "invalid request"
        return problem_response(Problem(ErrorCode.VALIDATION_ERROR, detail, errors=errors), request)
    if isinstance(exc, HTTPException):
        if exc.status_code == 405:
            problem = Problem(
                ErrorCode.METHOD_NOT_ALLOWED,
                f"{request.method} is not allowed on this path",
                headers=dict(exc.headers or {}),
            )
        else:
            problem = Problem(ErrorCode.NOT_FOUND, f"no endpoint {request.url.path}; see /docs")
        return problem_response(problem, request)
    if isinstance(exc, DamagedRecord):
        # Retrying will not mend it: 410, not 503; the operator learns of it by the metric.
        log.warning("damaged %s record on %s: %s", exc.record, request.url.path, exc)
        state = getattr(request.app.state, "gateway", None)
        if state is not None:
            state.metrics.damaged_records.labels(exc.record).inc()
        detail = f"{exc}; the task cannot be read or answered (the operator was told)"
        return problem_response(Problem(ErrorCode.DECODE_ERROR, detail), request)
    if isinstance(exc, DeepAgentsError):
        log.warning("dependency failed: %s", exc)
        return problem_response(
            Problem(ErrorCode.UNAVAILABLE, f"{exc.code}: retry shortly", retry_after_s=1), request
        )
    log.exception("unhandled error on %s", request.url.path, exc_info=exc)
    return problem_response(
        Problem(ErrorCode.INTERNAL_ERROR, "an unexpected error; it was logged"), request
    )


_HANDLED: tuple[type[Exception], ...] = (
    Problem,
    RequestValidationError,
    HTTPException,
    DeepAgentsError,
    Exception,
)
