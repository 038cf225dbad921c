"""What the routes share: built once per app in the lifespan."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from starlette.requests import Request

from deepagents.compose import Services
from deepagents.config.schema import FileConfig
from deepagents.config.settings import Settings
from deepagents.gateway.auth import Authenticator, MetricsGuard, Principal, authorization
from deepagents.gateway.budget import ParseBudget
from deepagents.gateway.health import FullCheck
from deepagents.gateway.http import HeaderDeadline, HeaderLimits
from deepagents.gateway.limits import Admission
from deepagents.gateway.metrics import GatewayMetrics
from deepagents.orchestrator import Orchestrator
from deepagents.store.audit.task_events import TaskEventLog
from deepagents.store.base import Registry, TaskRecords


@dataclass(slots=True)
class GatewayState:
    settings: Settings
    config: FileConfig
    services: Services
    orchestrator: Orchestrator
    auth: Authenticator
    admission: Admission
    registry: Registry
    full_check: FullCheck
    metrics: GatewayMetrics
    header_deadline: HeaderDeadline
    header_limits: HeaderLimits
    metrics_guard: MetricsGuard
    parse_budget: ParseBudget = field(default_factory=ParseBudget)
    # One thread for large bodies: several would only take turns at the GIL, taking more
    # of it from the event loop.
    parser: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="gateway-parse")
    )
    # Tasks' audit events (``routes_events.py``): built on first use, closed with the app.
    events: TaskEventLog | None = None

    def reload(self, config: FileConfig) -> None:
        """Serve with ``config`` from now on: routing (``Orchestrator.reload``), API keys,
        tenant limits, body limits, the header deadline (for connections opened from now
        on) and the full health check's timeout and cache. All is built before anything changes, and
        nothing awaits in between: a request sees the old file or the new one, never a mix.
        Raises ``ConfigError`` (changing nothing) for a file the running fleet cannot take."""
        auth = Authenticator(config.gateway.api_keys)
        guard = MetricsGuard(config.gateway.metrics_keys)
        self.orchestrator.reload(config)
        self.auth = auth
        self.metrics_guard = guard
        self.admission.config = config.gateway
        self.header_deadline.seconds = config.gateway.header_timeout_s
        self.header_limits.field_bytes = config.gateway.max_header_field_bytes
        self.header_limits.total_bytes = config.gateway.max_header_bytes
        self.full_check.timeout_s = config.gateway.probe_timeout_s
        self.full_check.cache_s = config.gateway.probe_cache_s
        self.config = config

    @property
    def tasks(self) -> TaskRecords:
        return self.services.tasks

    @property
    def owner_ttl_s(self) -> int:
        # As long as the orchestrator keeps the task's location key (admission writes both).
        return self.orchestrator.location_ttl_s


# Dependencies are coroutines on purpose: FastAPI runs a plain ``def`` dependency in the
# thread pool, a thread hop per dependency per request for what is an attribute read.
async def get_state(request: Request) -> GatewayState:
    return _state(request)


async def get_principal(request: Request) -> Principal:
    return _state(request).auth.authenticate(authorization(request.headers))


def _state(request: Request) -> GatewayState:
    state: GatewayState = request.app.state.gateway
    return state
