"""Run begun deliveries through the agent's contract, and stop the ones that must stop.

A batch's deliveries start one after the other in one asyncio task, each in a context of
its own (``_internal/eager.py``); each ends in one outcome of ``outcomes.py``."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time

from deepagents._internal.eager import Resume, first_step
from deepagents.contract.agent import current_attempt
from deepagents.contract.context import active_context, bind_context
from deepagents.contract.events import AuditEvent
from deepagents.contract.result import ErrorCode, Result, ResultStatus
from deepagents.contract.task import utcnow
from deepagents.errors import InvalidResult
from deepagents.modelcall.usage import current_usage, start_usage
from deepagents.tools.ledger import current_tool_ledger, start_tool_ledger
from deepagents.worker.agent_calls import AgentRunner
from deepagents.worker.asking import Asking
from deepagents.worker.context_features import ContextFeatures
from deepagents.worker.delegation import Delegating
from deepagents.worker.delivery_kit import DeliveryKit
from deepagents.worker.flight import FlightState, InFlight
from deepagents.worker.outcomes import Outcomes
from deepagents.worker.overdue import Overdue, Verdict
from deepagents.worker.retry import ErrorRules, decide
from deepagents.worker.settle import Settler
from deepagents.worker.steps import DeliverySteps

log = logging.getLogger("deepagents.worker")
# Settled by the group commit's callback, not by the delivery's own task.
_GROUP_COMMITTED = frozenset({FlightState.HANDED, FlightState.SETTLED})


class Run:
    def __init__(
        self,
        kit: DeliveryKit,
        *,
        runner: AgentRunner,
        outcomes: Outcomes,
        settler: Settler,
        overdue: Overdue,
        features: ContextFeatures,
    ) -> None:
        agent_settings, config = kit.agent_settings, kit.config
        self.asks, self.delegations = features.asks, features.delegations
        self.runner, self.agent_settings, self.config = runner, agent_settings, config
        self.steps = features.steps
        self.outcomes, self.encoder, self.settler = outcomes, kit.encoder, settler
        self.stats, self.events, self.overdue = kit.stats, kit.events, overdue
        self._max_wait = {name: tier.max_wait_ms for name, tier in config.tiers.items()}
        self.error_rules = ErrorRules.for_agent(agent_settings, runner.agent)

    # starting -----------------------------------------------------------------------------

    def start(self, flights: list[InFlight]) -> None:
        """Run the deliveries in a new task, one after the other (``in_turn``)."""
        if flights:
            task = asyncio.create_task(self.in_turn(flights))
            for flight in flights:
                flight.task = task

    async def in_turn(self, flights: list[InFlight]) -> None:
        """Start the deliveries one after the other in this task. Most finish in their first
        step; the first that waits keeps this task to itself to its end, and the ones after
        it start each in a task of its own, all in this turn of the loop: those of an agent
        that waits (a remote one) then share the loop's turns and the agent's batches,
        rather than starting one a turn, each in the task the one before it started."""
        for at, flight in enumerate(flights):
            if flight.state is FlightState.LOST:  # lost before it started: skip it
                self.settler.settle(flight)
                continue
            flight.move(FlightState.RUNNING)
            coro, context = self.process(flight), contextvars.copy_context()
            try:
                finished, yielded = first_step(coro, context)
            except BaseException:
                self._each(flights[at + 1 :])
                raise
            if not finished:
                self._each(flights[at + 1 :])
                await Resume(coro, context, yielded)
                return

    def _each(self, flights: list[InFlight]) -> None:
        for flight in flights:
            flight.task = asyncio.create_task(self._alone(flight))

    async def _alone(self, flight: InFlight) -> None:
        if flight.state is FlightState.LOST:  # lost before it started: skip it
            self.settler.settle(flight)
            return
        flight.move(FlightState.RUNNING)
        try:
            await self.process(flight)
        finally:
            # The task's context holds the delivery's steps, which hold the flight: without
            # this the three are a cycle, freed only by the collector's passes.
            flight.task = None

    async def here(self, flight: InFlight) -> None:
        """Run it in the caller's task (a suspect, in its reader)."""
        flight.move(FlightState.RUNNING)
        await self.process(flight)

    # stopping -----------------------------------------------------------------------------

    def lose(self, flight: InFlight) -> bool:
        """Another consumer owns its entry now: stop working on it; its outcome stands. True
        when this is news. Once its outcome is in the air, that script's owner check
        changes nothing and counts the loss."""
        if flight.state is FlightState.BEGUN:
            flight.move(FlightState.LOST)  # its batch's task skips it (cancelling that
            return True  # task would stop the deliveries before it too)
        if flight.state is FlightState.RUNNING:
            flight.move(FlightState.LOST)
            if flight.task is not None:
                flight.task.cancel()
            return True
        return False

    def cancel(self, flight: InFlight) -> bool:
        """Its task was cancelled (the cancel script answered it already): stop its run, or
        make its batch's task end it at once. True when this is news. One whose outcome is
        in the air is left to it: its script finds the task done (a duplicate)."""
        if flight.cancelled or flight.state not in (FlightState.BEGUN, FlightState.RUNNING):
            return False
        flight.cancelled = True
        if flight.state is FlightState.RUNNING and flight.task is not None:
            flight.task.cancel()
        return True

    def abandon(self, flight: InFlight) -> None:
        """Shutdown, after the grace period: cancel it, or make its batch's task skip it."""
        if flight.state is FlightState.BEGUN:
            flight.move(FlightState.LOST)
        elif flight.task is not None and flight.state is not FlightState.LOST:
            flight.task.cancel()  # lost ones were cancelled then

    # the contract -------------------------------------------------------------------------

    async def process(self, flight: InFlight) -> None:
        """One delivery, from its first step in its batch's task (``in_turn``)."""
        try:
            await self._contract(flight)
        except asyncio.CancelledError:
            # lost ownership or shutdown: the entry is someone else's, or handed back
            if flight.cancelled and flight.state is FlightState.RUNNING:
                self._end_cancelled(flight)
        except Exception:  # the entry stays pending and is reclaimed; never crash the worker
            log.exception("delivery failed", extra={"action": "delivery_crashed"})
        finally:
            if flight.state not in _GROUP_COMMITTED:
                self.settler.settle(flight)

    def _end_cancelled(self, flight: InFlight) -> None:
        """Its task was cancelled while it ran: the cancel script answered it, so this
        commit finds it done and acks its entry as a duplicate (its result is not written)."""
        result = Result.failed(ErrorCode.CANCELLED, "cancelled while running")
        self.outcomes.commit(flight, result, time.monotonic(), flight.queue_ms, "failed", [])

    async def _contract(self, flight: InFlight) -> None:
        if flight.cancelled:  # cancelled before its turn in its batch came
            self._end_cancelled(flight)
            return
        if flight.deliveries > self.agent_settings.max_deliveries:
            await self._exhausted(flight)  # crashes or failures: dead-letter it
            return
        task, ref, queue_ms = flight.envelope.task, flight.stream, flight.queue_ms
        started = time.monotonic()
        events: list[AuditEvent] = []
        if task.deadline is not None and task.expired():
            result = Result.failed(
                ErrorCode.DEADLINE_EXCEEDED, "deadline passed before the task started"
            )
            self.outcomes.commit(flight, result, started, queue_ms, "expired", events)
            return
        degraded = False
        if queue_ms > self._max_wait[ref.tier]:
            verdict = await self._overdue(flight, queue_ms, started, events)
            if verdict is Verdict.HANDLED:
                return
            degraded = verdict is Verdict.RUN_DEGRADED
        asking = self.asks.open(ref.keys, task)
        delegating = self.delegations.open(ref.keys, task)
        try:
            result = await self._run_metered(flight, events, degraded)
        except TimeoutError:
            result = Result.failed(ErrorCode.DEADLINE_EXCEEDED, "deadline passed while running")
        except Exception as exc:
            if asking.request is not None or delegating.request is not None:
                await self._park(flight, asking, delegating, [*events, *self._unsent(flight)])
                return
            decision = decide(
                exc,
                deliveries=flight.deliveries,
                max_deliveries=self.agent_settings.max_deliveries,
                policy=self.agent_settings.retry,
                time_left_ms=_time_left_ms(flight),
                rules=self.error_rules,
            )
            if decision.action in ("retry", "wait"):
                counted = decision.action == "retry"
                kind = "retried" if counted else "waited"
                await self.outcomes.reschedule(
                    flight,
                    ref.tier,
                    decision.delay_ms,
                    kind,
                    decision.reason,
                    self._unsent(flight),  # its model calls' events: its spend is counted
                    counted=counted,
                )
                return
            if decision.action == "dead_letter":
                await self.outcomes.dead_letter(
                    flight, decision.code, decision.reason, started, queue_ms
                )
                return
            result = _with_spend(Result.failed(decision.code, decision.reason))
        if asking.request is not None or delegating.request is not None:
            await self._park(flight, asking, delegating, events)  # it caught the Parked
            return
        events += asking.events
        kind = "succeeded" if result.status is not ResultStatus.FAILED else "failed"
        await self._commit(flight, result, started, queue_ms, kind, events)

    async def _commit(
        self,
        flight: InFlight,
        result: Result,
        started: float,
        queue_ms: int,
        kind: str,
        events: list[AuditEvent],
    ) -> None:
        """Hand the result to the group commit. One that breaks the contract (its output is
        not JSON) is handed nowhere: the task is dead-lettered instead."""
        try:
            self.outcomes.commit(flight, result, started, queue_ms, kind, events)
        except InvalidResult as exc:
            message = f"{type(exc).__name__}: {exc}"
            await self.outcomes.dead_letter(
                flight, ErrorCode.INVALID_RESULT, message, started, queue_ms
            )
            return
        if self.overdue.answers is not None:  # an agent degrade may answer from a cache
            await self.overdue.remember(flight.envelope.task, result)

    async def _park(
        self,
        flight: InFlight,
        asking: Asking,
        delegating: Delegating,
        events: list[AuditEvent],
    ) -> None:
        """Park the task for a person's reply (worker/asking.py) or for its children
        (worker/delegation.py), the delivery's own audit events (its model calls, a resume
        that recorded no step) sent with its ``waiting`` event rather than dropped."""
        if asking.request is None:
            await self.outcomes.park_children(
                flight, delegating, self.events.keep(events), self.delegations.sweep_ms
            )
            return
        if self.events.wanted:
            asking.events[:0] = events
        await self.outcomes.park(flight, asking)

    def _unsent(self, flight: InFlight) -> list[AuditEvent]:
        """What ``_run_metered`` adds to a delivery's events when the run returns: here the
        run raised (it parked), so they are still in its usage ledger and step context."""
        if not self.events.wanted:
            return []
        usage, ctx = current_usage(), active_context()
        events = usage.audit_events(flight.envelope.task.task_id) if usage is not None else []
        tools = current_tool_ledger()
        if tools is not None:
            events += tools.audit_events(flight.envelope.task.task_id)
        if isinstance(ctx, DeliverySteps):
            events += ctx.leftover_events()
        return events

    async def _run_metered(
        self, flight: InFlight, events: list[AuditEvent], degraded: bool = False
    ) -> Result:
        """Run the contract; model calls made inside add their tokens, cost and audit events.
        The deadline bounds the run (in line rather than a helper coroutine: per task).
        ``degraded``: the agent's degraded_execute runs instead of execute (degrade)."""
        task = flight.envelope.task
        usage = start_usage()  # in this delivery's own task context: nothing to reset
        if flight.spent_tokens or flight.spent_cost_usd:  # its earlier deliveries' spend
            usage.carry(flight.spent_tokens, flight.spent_cost_usd, False)
        tools = start_tool_ledger()  # its tool calls' audit events, likewise
        current_attempt.set(flight.envelope.attempt)
        execute = "degraded_execute" if degraded else "execute"
        ctx = self.steps.open(flight, self.lose)  # the durable steps (worker/steps.py)
        bind_context(ctx)
        if ctx.restores:  # restored state first
            await ctx.start()
        if task.deadline is None:
            result = await self.runner.run(task, execute)
        else:
            remaining = (task.deadline - utcnow()).total_seconds()
            async with asyncio.timeout(max(0.0, remaining)):
                result = await self.runner.run(task, execute)
        if degraded and not result.degraded:
            result = result.model_copy(update={"degraded": True})
        if usage.counted:
            result = usage.apply(result)
            if self.events.wanted and usage.attempts:
                events += usage.audit_events(task.task_id)
        if self.events.wanted and tools.calls:
            events += tools.audit_events(task.task_id)
        if self.events.wanted:
            events += ctx.leftover_events()
        return result

    async def _overdue(
        self, flight: InFlight, queue_ms: int, started: float, events: list[AuditEvent]
    ) -> Verdict:
        """The tier's on_overdue action (``overdue.py``): run it, run it degraded, or the
        delivery's outcome is settled there (dropped, a cached answer, a tier down)."""
        return await self.overdue.act(flight, queue_ms, started, events)

    async def _exhausted(self, flight: InFlight) -> None:
        """Delivered more than max_deliveries times (crashes or failures): dead-letter it."""
        reason = f"delivered {flight.deliveries} times (max {self.agent_settings.max_deliveries})"
        await self.outcomes.dead_letter(
            flight, ErrorCode.MAX_DELIVERIES, reason, time.monotonic(), flight.queue_ms
        )


def _time_left_ms(flight: InFlight) -> float | None:
    deadline = flight.envelope.task.deadline
    if deadline is None:
        return None
    return (deadline - utcnow()).total_seconds() * 1000


def _with_spend(result: Result) -> Result:
    """A failure still reports what the run spent (its model calls, its children's): a
    parent that reads it counts it, as it counts a success's."""
    usage = current_usage()  # the ledger ``_run_metered`` started in this task context
    return usage.apply(result) if usage is not None and usage.counted else result
