"""What happens to a task that waited longer than its tier's ``max_wait_ms``: the tier's
``on_overdue`` action, counted (``deepagents_tasks_overdue_total{agent,tier,action}``) and
audited (an ``overdue`` event naming the action and what it did).

- ``alert``: the task runs as usual; the counter and the event are what an alert rule and
  an auditor see.
- ``degrade``: the agent's declared degraded path answers, marked ``degraded``:
  ``degraded_execute`` if it has one, else the last good answer for its ``cache_key``.
  With neither (or no answer cached), the task moves to the next tier, as DESIGN.md's
  first reading of degrade says; on the last tier it runs, late (there is nowhere lower).
- ``drop``: the task fails with ``dropped``, unrun.

Also keeps the last good answers the cache path answers from (``remember``).
"""

from __future__ import annotations

import enum
import logging
from typing import Any

import orjson
from pydantic_core import to_jsonable_python

from deepagents.config.schema import OverdueAction
from deepagents.contract.agent import declares
from deepagents.contract.events import AuditEvent
from deepagents.contract.result import ErrorCode, Result
from deepagents.contract.task import Task
from deepagents.errors import TransportError
from deepagents.store.base import Answers
from deepagents.worker.delivery_kit import DeliveryKit
from deepagents.worker.flight import InFlight
from deepagents.worker.outcomes import Outcomes

log = logging.getLogger("deepagents.worker")
MOVED = "moved to the next tier"


class Verdict(enum.Enum):
    RUN = "run"  # run the contract as usual
    RUN_DEGRADED = "run_degraded"  # run it with degraded_execute, mark the Result degraded
    HANDLED = "handled"  # the delivery has its outcome already (dropped, cached, moved)


class Overdue:
    def __init__(self, kit: DeliveryKit, *, outcomes: Outcomes, answers: Answers | None) -> None:
        agent, config, metrics = kit.agent, kit.config, kit.metrics
        self.agent, self.config, self.outcomes, self.encoder = agent, config, outcomes, kit.encoder
        self.events = kit.events
        # One child per tier, made at start: its series exists (at 0) before the first
        # overdue task, so the series are fixed by the configuration and an alert's
        # increase() sees the first one too.
        self._counted = (
            {
                name: metrics.overdue.labels(agent.name, name, tier.on_overdue.value)
                for name, tier in config.tiers.items()
            }
            if metrics is not None
            else None
        )
        self.ttl_s = kit.agent_settings.answer_cache_ttl_s
        self.has_degraded_path = declares(agent, "degraded_execute")
        # Answers are kept only for an agent that degrade answers from them: one with a
        # cache_key and no degraded_execute (which comes first).
        caches = declares(agent, "cache_key") and not self.has_degraded_path
        self.answers = answers if caches else None

    async def act(
        self, flight: InFlight, queue_ms: int, started: float, events: list[AuditEvent]
    ) -> Verdict:
        """Count, audit and apply the tier's action; the verdict says what the run does."""
        tier = flight.stream.tier
        config = self.config.tiers[tier]
        action = config.on_overdue
        if self._counted is not None:
            self._counted[tier].inc()
        cached: Result | None = None
        if action is OverdueAction.DROP:
            verdict, did = Verdict.HANDLED, "dropped"
        elif action is OverdueAction.DEGRADE:
            verdict, did, cached = await self._degrade(flight)
        else:
            verdict, did = Verdict.RUN, "ran late"
        log.warning(
            "task waited %d ms in %s (max %d ms): %s, %s",
            queue_ms,
            tier,
            config.max_wait_ms,
            action,
            did,
            extra={"action": "overdue", "task_id": flight.envelope.task.task_id},
        )
        if self.events.wanted:  # before the outcome's own event: the ledger reads overdue, then it
            events.append(
                self.encoder.event(
                    "overdue",
                    flight,
                    queue_ms=queue_ms,
                    max_wait_ms=config.max_wait_ms,
                    on_overdue=action.value,
                    outcome=did,
                )
            )
        if action is OverdueAction.DROP:
            waited = f"waited {queue_ms} ms in {tier} (max_wait_ms {config.max_wait_ms})"
            result = Result.failed(ErrorCode.DROPPED, waited)
            self.outcomes.commit(flight, result, started, queue_ms, "dropped", events)
        elif cached is not None:
            self.outcomes.commit(flight, cached, started, queue_ms, "succeeded", events)
        elif did == MOVED:
            tiers = self.config.tier_names
            lower = tiers[tiers.index(tier) + 1]
            reason = f"waited {queue_ms} ms"
            await self.outcomes.reschedule(flight, lower, 0, "degraded", reason, events)
        return verdict

    async def _degrade(self, flight: InFlight) -> tuple[Verdict, str, Result | None]:
        """The first path that can answer: degraded_execute, a cached answer, a tier down."""
        if self.has_degraded_path:
            return Verdict.RUN_DEGRADED, "degraded_execute", None
        cached = await self._cached(flight.envelope.task)
        if cached is not None:
            return Verdict.HANDLED, "cached answer", Result(output=cached, degraded=True)
        tiers = self.config.tier_names
        if tiers.index(flight.stream.tier) + 1 < len(tiers):
            return Verdict.HANDLED, MOVED, None
        return Verdict.RUN, "ran late (no lower tier)", None

    async def _cached(self, task: Task) -> Any:
        """The cached output for this task's key, or None (no key, no answer, no Redis)."""
        key = self._key(task) if self.answers is not None else None
        if key is None or self.answers is None:
            return None
        try:
            raw = await self.answers.get(self.agent.name, key)
        except TransportError as exc:  # no answer to stand in: the next path serves
            log.warning("reading a cached answer failed: %s", exc, extra={"action": "cache"})
            return None
        try:
            return None if raw is None else orjson.loads(raw)
        except orjson.JSONDecodeError:  # not what remember() wrote: no stand-in
            log.warning("a cached answer is not JSON; ignored", extra={"action": "cache"})
            return None

    async def remember(self, task: Task, result: Result) -> None:
        """After a good run of an agent with a ``cache_key``: keep its answer."""
        if self.answers is None or not result.ok or result.degraded or result.output is None:
            return
        key = self._key(task)
        if key is None:
            return
        try:
            output = orjson.dumps(result.output, default=to_jsonable_python)
            await self.answers.put(self.agent.name, key, output, self.ttl_s)
        except (TransportError, TypeError) as exc:  # a fallback's store: never fail the task
            log.warning("caching an answer failed: %s", exc, extra={"action": "cache"})

    def _key(self, task: Task) -> str | None:
        try:
            key = self.agent.cache_key(task)
        except Exception as exc:  # the agent's bug must not fail the task: no stand-in
            log.warning("cache_key() raised %r", exc, extra={"action": "cache"})
            return None
        return key if isinstance(key, str) and key else None
