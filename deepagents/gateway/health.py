"""Health: liveness (process up, Redis answers) and the end-to-end probe.

The full check submits a probe task and waits for it within ``probe_timeout_s``. On a
timeout it names the hop that did not happen by looking at where the task got to:
still ``queued`` means no probe worker took it (hop ``queue``), ``running`` means the
worker did not finish (hop ``worker``), ``done`` means the result never came back (hop
``reply``). Concurrent full checks share one probe, and a report is answered again for
``probe_cache_s`` (the endpoint is unauthenticated, and each probe writes a task): however
often it is called, a process runs at most one probe per window.
A finished probe's records expire after ``PROBE_TTL_S`` instead of the usual day and week.
The full report also names the agent types the registry holds unhealthy (a remote agent
whose service is down, with the reason its workers recorded and its circuit's state).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from datetime import timedelta

from deepagents.config.schema import FileConfig
from deepagents.contract.result import Result
from deepagents.contract.task import utcnow
from deepagents.errors import DeepAgentsError, ResultTimeout
from deepagents.gateway.probe import PROBE_INTENT
from deepagents.gateway.schemas import Health, Hop, UnhealthyAgent
from deepagents.orchestrator import Orchestrator, TaskHandle
from deepagents.store.base import Registry
from deepagents.transport.base import Inspection

_STUCK_AT = {"queued": "queue", "retrying": "queue", "running": "worker"}
PROBE_TTL_S = 300


def _ms_since(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 3)


async def liveness(bus: Inspection) -> Health:
    redis_ms = await bus.ping_ms()
    if redis_ms is None:
        return Health(
            status="fail",
            failed_hop="redis",
            hops=[Hop(name="redis", ok=False, detail="Redis did not answer PING")],
        )
    return Health(status="ok", redis_ms=redis_ms)


class FullCheck:
    """Single-flight end-to-end probe."""

    def __init__(
        self,
        orchestrator: Orchestrator,
        timeout_s: float,
        cache_s: float,
        registry: Registry | None = None,
    ) -> None:
        self.orchestrator = orchestrator
        self.registry = registry
        self.timeout_s = timeout_s
        self.cache_s = cache_s
        self._running: asyncio.Future[Health] | None = None
        self._last: tuple[float, Health] | None = None  # (when it finished, the report)

    async def run(self) -> Health:
        last = self._last
        if last is not None and time.monotonic() - last[0] < self.cache_s:
            return last[1]
        if self._running is None or self._running.done():
            self._running = asyncio.ensure_future(self._probe_and_keep())
        return await asyncio.shield(self._running)

    async def _probe_and_keep(self) -> Health:
        report = await self._probe()
        if report.failed_hop != "redis":
            report = report.model_copy(update={"unhealthy_agents": await self._unhealthy()})
        self._last = (time.monotonic(), report)
        return report

    async def _unhealthy(self) -> list[UnhealthyAgent]:
        if self.registry is None:
            return []
        config = self.orchestrator.config
        try:
            names = sorted(await self.registry.agents(what="read agent health"))
            found = [
                (await self.registry.health([n], stale_ms=_stale_ms(config, n)))[n] for n in names
            ]
        except DeepAgentsError:
            return []  # the probe's report matters more
        return [
            UnhealthyAgent(
                name=h.agent,
                instances=h.instances,
                healthy=h.healthy,
                circuit=h.circuit,
                detail=h.detail,
            )
            for h in found
            if (h.instances and h.healthy < h.instances) or h.circuit not in (None, "closed")
        ]

    async def _probe(self) -> Health:
        live = await liveness(self.orchestrator.bus)
        if live.status != "ok":
            return live
        hops = [Hop(name="redis", ok=True, latency_ms=live.redis_ms)]
        start = time.perf_counter()
        task = {
            "intent": PROBE_INTENT,
            "payload": {"nonce": uuid.uuid4().hex},
            "priority": 0,
            # A probe nobody took in time is worthless later: let the worker drop it.
            "deadline": utcnow() + timedelta(seconds=self.timeout_s),
        }
        try:
            handle = await self.orchestrator.submit(task)
        except DeepAgentsError as exc:
            hops.append(Hop(name="enqueue", ok=False, detail=f"{exc.code}: {exc}"))
            return Health(status="fail", redis_ms=live.redis_ms, hops=hops, failed_hop="enqueue")
        enqueued = time.perf_counter()
        hops.append(Hop(name="enqueue", ok=True, latency_ms=_ms_since(start)))
        try:
            result = await handle.result(timeout=self.timeout_s)
        except ResultTimeout:
            return await self._timed_out(handle.task_id, hops, live.redis_ms)
        finally:
            await self._expire(handle)
        received_ms = time.time() * 1000
        hops += _result_hops(result, enqueued, received_ms)
        bad = next((h.name for h in hops if not h.ok), None)
        return Health(
            status="fail" if bad else "ok", redis_ms=live.redis_ms, hops=hops, failed_hop=bad
        )

    async def _expire(self, handle: TaskHandle) -> None:
        with contextlib.suppress(DeepAgentsError):  # the probe's report matters more
            await self.orchestrator.tasks.expire(
                handle.agent, handle.shard, handle.task_id, PROBE_TTL_S
            )

    async def _timed_out(self, task_id: str, hops: list[Hop], redis_ms: float | None) -> Health:
        state = "unknown"
        try:  # where it is stuck, then stopped there (a running one too)
            info = await self.orchestrator.lookup(task_id)
            state = info.get("state", state) if info is not None else "missing"
            outcome = await self.orchestrator.cancel(task_id)
            if outcome != "ok":
                state = outcome
        except DeepAgentsError:
            pass
        hop = _STUCK_AT.get(state, "reply")
        detail = {
            "queue": "no probe worker took the task (is `deepagents worker "
            "deepagents.gateway.probe:ProbeAgent` running?)",
            "worker": "the probe worker took the task but did not finish it",
            "reply": f"the task is {state} but its result did not reach the gateway",
        }[hop]
        hops.append(Hop(name=hop, ok=False, detail=f"{detail} within {self.timeout_s:g} s"))
        return Health(status="fail", redis_ms=redis_ms, hops=hops, failed_hop=hop)


def _result_hops(result: Result, enqueued: float, received_ms: float) -> list[Hop]:
    metrics = result.metrics
    queue_ms = metrics.queue_ms
    worker_ms = metrics.latency_ms
    total_ms = (time.perf_counter() - enqueued) * 1000
    ran_at = result.output.get("ran_at_ms") if isinstance(result.output, dict) else None
    reply_ms = None
    if result.finished_at is not None:
        reply_ms = max(0.0, received_ms - result.finished_at.timestamp() * 1000)
    elif isinstance(ran_at, float | int):
        reply_ms = max(0.0, received_ms - float(ran_at))
    ok = result.ok
    detail = "" if ok else f"probe answered {result.status.value}: {result.error}"
    return [
        Hop(name="queue", ok=True, latency_ms=_round(queue_ms)),
        Hop(name="worker", ok=ok, latency_ms=_round(worker_ms), detail=detail),
        Hop(
            name="reply",
            ok=True,
            latency_ms=_round(reply_ms),
            detail=f"end to end {total_ms:.1f} ms after enqueue",
        ),
    ]


def _stale_ms(config: FileConfig, name: str) -> int:
    # Workers beat every third of the visibility timeout: silence for a whole one is dead.
    return config.agent_settings(name).visibility_timeout_ms


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
