"""The fleet's circuit breaker in front of one remote agent's service.

It is the model-call layer's breaker (``store.breaker``), keyed by the agent type
(``{remote:<agent>}``), so every worker of the type sees one state: when enough calls fail
over the window, the circuit opens for the whole fleet and no worker calls the service until
the cool-down ends; then a single call is let through as the probe, and its outcome closes or
re-opens it. A refused task waits (``CircuitOpen``: rescheduled with the same attempt, its
delivery not counted), until its deadline and at most ``max_wait_s`` after it was created.
"""

from __future__ import annotations

import random
from datetime import timedelta

from deepagents._internal.background import Background
from deepagents.config.schema import RemoteBreakerConfig
from deepagents.contract.task import Task, utcnow
from deepagents.errors import CircuitOpen, RetryableError
from deepagents.remote.errors import ServiceDown, ServiceUnreachable
from deepagents.store.breaker import ALLOWED, BreakerState, CircuitBreaker, Keyed, Permit
from deepagents.store.models import RedisClient
from deepagents.transport.keys import Keys

# The calls whose success is the service's work done (the others are trivial steps).
_WORK = frozenset({"execute", "run"})
# The longest random spread added to a refused task's wait.
MAX_SPREAD_S = 60.0


class FleetCircuit:
    def __init__(
        self, redis: RedisClient, prefix: str, agent: str, config: RemoteBreakerConfig
    ) -> None:
        keys = Keys(prefix)
        where = Keyed(keys.remote_breaker(agent), keys.remote_breaker_window(agent))
        self._breaker = CircuitBreaker(redis, where, config)
        self._config = config
        self._agent = agent
        self._background = Background()

    def permit_now(self) -> Permit | None:
        """Leave to call without awaiting anything while this worker read the circuit
        closed moments ago; None when ``permit`` must ask."""
        return ALLOWED if self._breaker.allowed_now() else None

    async def permit(self, task: Task, step: str, call_timeout_s: float) -> Permit:
        """Leave to call, or raise the error the refused task goes on with. A probe is held
        as long as its call may take: if its worker dies, the next call probes instead."""
        permit = await self._breaker.allow(probe_ttl_s=call_timeout_s)
        if permit.allowed:
            return permit
        raise self._refusal(task, step, permit.retry_in_s)

    def _refusal(self, task: Task, step: str, retry_in_s: float) -> RetryableError:
        cooldown = self._config.cooldown_s
        # At most a cool-down (a half-open probe may hold for a long call), plus a random
        # spread: the tasks that waited come back spread out, not all at the instant the
        # circuit half-opens. Half a cool-down, or a quarter of the task's age when that is
        # longer (at most MAX_SPREAD_S): a backlog waiting through a long outage is looked
        # at less and less often, so bouncing it costs Redis little, and it still runs
        # within about a minute of the service's return.
        age_s = (utcnow() - task.created_at).total_seconds()
        spread = max(cooldown / 2, min(age_s / 4, MAX_SPREAD_S))
        wait = min(retry_in_s, cooldown) + random.uniform(0, spread)
        what = f"{step}: the circuit of {self._agent}'s service is open for the fleet"
        waited_until = task.created_at + timedelta(seconds=self._config.max_wait_s)
        if utcnow() < waited_until:
            return CircuitOpen(f"{what}; waiting {wait:.1f} s", retry_after_s=wait)
        # Waited long enough: from now on a refusal counts, and max_deliveries ends it.
        why = f"{what}, and the task has waited max_wait_s ({self._config.max_wait_s:g} s)"
        return ServiceDown(why, retry_after_s=wait)

    async def record(
        self, permit: Permit, task: Task, step: str, error: BaseException | None
    ) -> None:
        """One call's outcome. Only a service that did not answer, or answered 5xx, is
        unwell; any other answer (a 4xx, a 429, a malformed body) shows it is up. The window
        counts one outcome per attempt, as the model-call breaker counts one per call: the
        step that failed, or else ``execute``'s (or ``run``'s) answer (the trivial steps'
        successes would dilute a service whose work fails); and a failure once per task.

        A service not there at all (``ServiceUnreachable``) whose circuit is open once this
        failure is counted (it tripped it, or another worker did) raises the refusal the
        open circuit gives: the task waits, its delivery not counted."""
        unwell = isinstance(error, ServiceDown)
        if permit.probe and isinstance(error, TimeoutError):
            unwell = True  # the task's deadline ended the trial: no answer, so no all-clear
        if unwell or permit.probe:
            down = isinstance(error, ServiceUnreachable)
            state = await self._breaker.record(
                not unwell, probe=permit.probe, down=down, task=task.task_id
            )
            if down and state is not BreakerState.CLOSED:
                raise self._refusal(task, step, self._config.cooldown_s) from error
        elif error is None:
            self.succeeded(step)

    def succeeded(self, step: str) -> None:
        """A call's success outside a probe (``record`` of one, without awaiting): in a
        closed circuit it only feeds the window, so the answer need not wait."""
        if step in _WORK and self._breaker.note_success():
            self._background.send(self._breaker.flush())

    async def state(self) -> BreakerState:
        return await self._breaker.state()

    async def aclose(self) -> None:
        """Send the successes not sent yet, after the flushes in the air."""
        await self._background.drain()
        await self._breaker.flush()
