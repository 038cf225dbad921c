"""One delivery through the effectively-once protocol, step by step: ``begin.py`` (decode,
suspects, the begin script), ``run.py`` (the contract), ``commit.py`` (the one
owner-checked script each delivery ends in) and ``settle.py`` (slots and the quarantine).
This module wires them from the worker's parts; none of them sees the worker."""

from __future__ import annotations

import logging

from deepagents.config.schema import AgentSettings, FileConfig
from deepagents.contract.agent import AgentContract
from deepagents.store.base import Answers
from deepagents.store.claims import ClaimStore
from deepagents.telemetry.metrics import Metrics
from deepagents.transport.base import MessageBus, RawEntry, StreamRef
from deepagents.worker.asking import Asks
from deepagents.worker.begin import Begin
from deepagents.worker.commit import Outcomes
from deepagents.worker.delegation import Delegations
from deepagents.worker.encode import Encoder
from deepagents.worker.flight import InFlight
from deepagents.worker.overdue import Overdue
from deepagents.worker.pools import TierPool
from deepagents.worker.quarantine import Quarantine
from deepagents.worker.run import Run
from deepagents.worker.runner import AgentRunner
from deepagents.worker.settle import Settler
from deepagents.worker.stats import WorkerStats
from deepagents.worker.steps import StepBook

log = logging.getLogger("deepagents.worker")


class DeliveryHandler:
    def __init__(
        self,
        *,
        agent: AgentContract,
        agent_settings: AgentSettings,
        config: FileConfig,
        consumer: str,
        bus: MessageBus,
        pools: dict[str, TierPool],
        inflight: dict[tuple[str, str], InFlight],
        stats: WorkerStats,
        runner: AgentRunner,
        metrics: Metrics | None,
        outbox: bool,
        max_task_bytes: int,
        answers: Answers | None = None,
        asks: Asks | None = None,
        claims: ClaimStore | None = None,
        result_ttl_s: int = 86_400,
        delegations: Delegations | None = None,
    ) -> None:
        group = agent.name
        self.runner = runner
        self.stats = stats
        self.quarantine = Quarantine()
        self.settler = Settler(pools, inflight, self.quarantine)
        encoder = Encoder(agent, consumer)
        self.outcomes = Outcomes(
            bus=bus,
            group=group,
            consumer=consumer,
            agent=agent,
            agent_settings=agent_settings,
            tier_names=config.tier_names,
            capacities={name: pool.capacity for name, pool in pools.items()},
            encoder=encoder,
            settler=self.settler,
            stats=stats,
            metrics=metrics,
            outbox=outbox,
        )
        self.committer = self.outcomes.committer
        if delegations is not None:  # a child's end goes to its parent after its commit
            self.outcomes.parentage = delegations.parentage
        self.steps = StepBook(
            bus=bus,
            group=group,
            consumer=consumer,
            agent=agent,
            agent_settings=agent_settings,
            encoder=encoder,
            executor=runner.executor,
            claims=claims,
            result_ttl_s=result_ttl_s,
            stats=stats,
            metrics=metrics.steps if metrics is not None else None,
            outbox=outbox,
            tracer=runner.tracer,
        )
        self.run = Run(
            runner=runner,
            agent_settings=agent_settings,
            config=config,
            outcomes=self.outcomes,
            encoder=encoder,
            settler=self.settler,
            stats=stats,
            outbox=outbox,
            overdue=Overdue(
                agent=agent,
                agent_settings=agent_settings,
                config=config,
                outcomes=self.outcomes,
                encoder=encoder,
                metrics=metrics,
                answers=answers,
                outbox=outbox,
            ),
            asks=asks,
            steps=self.steps,
            delegations=delegations,
        )
        self.begin = Begin(
            bus=bus,
            group=group,
            consumer=consumer,
            max_task_bytes=max_task_bytes,
            run=self.run,
            outcomes=self.outcomes,
            encoder=encoder,
            settler=self.settler,
            stats=stats,
            outbox=outbox,
        )

    async def dispatch(
        self, ref: StreamRef, entries: list[RawEntry], *, fresh: bool = False
    ) -> None:
        await self.begin.dispatch(ref, entries, fresh=fresh)

    async def payload_lost(self, ref: StreamRef, entry_ids: list[str]) -> None:
        await self.outcomes.payload_lost(ref, entry_ids)

    def cancelled(self, task_id: str) -> None:
        """Its task was cancelled while running here (the cancel script answered it): stop
        its run; its entry is then acked as a duplicate. Nothing when it does not run here."""
        for flight in list(self.settler.inflight.values()):
            if flight.envelope.task.task_id == task_id and self.run.cancel(flight):
                log.info(
                    "task %s cancelled while running; its run here stops",
                    task_id,
                    extra={"action": "run_cancelled", "task_id": task_id},
                )

    def lost(self, ref: StreamRef, entry_id: str) -> None:
        """The heartbeat found another owner of this entry."""
        flight = self.settler.inflight.get((ref.name, entry_id))
        if flight is not None and self.run.lose(flight):
            self.stats.lost_ownership += 1
            # A paused or starved worker: its lease ran out and another consumer claimed
            # the task (a step in flight here may run again there). Said once per task,
            # as a refused commit or step record is.
            task_id = flight.envelope.task.task_id
            log.warning(
                "task %s: another consumer owns its entry now; its run here stops",
                task_id,
                extra={"action": "lease_lost", "task_id": task_id},
            )

    async def stop(self) -> None:
        """Shutdown, after the grace period: stop what is left and hand its entries back."""
        leftover = list(self.settler.inflight.values())
        for flight in leftover:
            self.run.abandon(flight)
        if leftover:
            await self.outcomes.hand_back(leftover)
        await self.outcomes.notified()  # children's ends in the air reach their parents
