"""Operations endpoints: /health (liveness and the end-to-end probe), /metrics, /v1/agents."""

from __future__ import annotations

import time
from typing import Annotated

import orjson
from fastapi import APIRouter, Depends, Query
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response

from deepagents.errors import ErrorCode
from deepagents.gateway.auth import Principal, authorization
from deepagents.gateway.health import liveness
from deepagents.gateway.metrics import scrape_registry
from deepagents.gateway.problems import responses_for
from deepagents.gateway.routes_tasks import bearer
from deepagents.gateway.schemas import AgentList, AgentView, Health
from deepagents.gateway.state import GatewayState, get_principal, get_state

router = APIRouter(tags=["operations"])
agents_router = APIRouter(prefix="/v1", dependencies=[Depends(bearer)], tags=["agents"])
StateDep = Annotated[GatewayState, Depends(get_state)]


@router.get(
    "/health",
    response_model=Health,
    responses={503: {"model": Health, "description": "unhealthy; `failed_hop` names the hop"}},
    summary="Liveness (Redis answers); with full=true, a probe task end to end",
)
async def health(state: StateDep, full: Annotated[bool, Query()] = False) -> Response:
    report = await (state.full_check.run() if full else liveness(state.services.bus))
    status = 200 if report.status == "ok" else 503
    headers = {"Retry-After": "1"} if status == 503 else None
    return Response(
        orjson.dumps(report.model_dump(mode="json")),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    responses={
        200: {
            "content": {"text/plain": {"schema": {"type": "string"}}},
            "description": "Prometheus text exposition format",
        },
        **responses_for(ErrorCode.UNAUTHORIZED),
    },
)
async def metrics(request: Request, state: StateDep) -> Response:
    state.metrics_guard.check(authorization(request.headers))
    registry = scrape_registry(state.metrics)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


@agents_router.get(
    "/agents",
    response_model=AgentList,
    responses=responses_for(
        ErrorCode.UNAUTHORIZED,
        ErrorCode.RATE_LIMITED,
        ErrorCode.TOO_MANY_IN_FLIGHT,
        ErrorCode.UNAVAILABLE,
    ),
    summary="Agent types with versions, intents and live instances",
)
async def list_agents(
    state: StateDep, principal: Annotated[Principal, Depends(get_principal)]
) -> Response:
    async with state.admission.admit(principal.tenant, 1):
        found = await state.registry.agents()
    now_ms = int(time.time() * 1000)
    views = []
    for name, info in found.items():
        # Workers beat every third of the visibility timeout: silence for a whole one is dead.
        window = state.config.agent_settings(name).visibility_timeout_ms
        seen = [int(ms) for ms in dict(info["instances"]).values()]  # type: ignore[call-overload]
        live = sum(1 for ms in seen if now_ms - ms <= window)
        views.append(
            AgentView(
                name=name,
                version=str(info["version"]),
                intents=list(info["intents"]),  # type: ignore[call-overload]
                instances=live,
                healthy=live > 0,
                last_seen_ms=max(seen) if seen else None,
            )
        )
    body = AgentList(agents=views)
    return Response(orjson.dumps(body.model_dump(mode="json")), media_type="application/json")
