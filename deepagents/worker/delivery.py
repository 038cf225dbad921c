"""One delivery through the effectively-once protocol, step by step: ``begin.py`` (decode,
suspects, the begin script), ``execution.py`` (the contract), ``outcomes.py`` (the one
owner-checked script each delivery ends in) and ``settle.py`` (slots and the quarantine).
This module wires them from the worker's parts (what they all share: ``delivery_kit.py``);
none of them sees the worker."""

from __future__ import annotations

import logging

from deepagents.store.base import Answers
from deepagents.transport.base import RawEntry, StreamRef
from deepagents.worker.agent_calls import AgentRunner
from deepagents.worker.begin import Begin
from deepagents.worker.context_features import ContextFeatures
from deepagents.worker.delivery_kit import DeliveryKit
from deepagents.worker.execution import Run
from deepagents.worker.outcomes import Outcomes
from deepagents.worker.overdue import Overdue
from deepagents.worker.settle import Settler
from deepagents.worker.versioning import VersionTally

log = logging.getLogger("deepagents.worker")


class DeliveryHandler:
    def __init__(
        self,
        kit: DeliveryKit,
        *,
        settler: Settler,
        runner: AgentRunner,
        features: ContextFeatures,
        answers: Answers | None = None,
        tally: VersionTally | None = None,
    ) -> None:
        """``answers``: the last good answers an agent's degrade may answer from (None:
        none kept). ``tally``: under a rollout, this version's landed outcomes."""
        self.runner = runner
        self.stats = kit.stats
        self.settler = settler
        self.outcomes = Outcomes(
            kit,
            settler=settler,
            capacities=settler.capacities,
            tally=tally,
            # a child's end goes to its parent after its commit
            parentage=features.delegations.parentage,
        )
        self.committer = self.outcomes.committer
        self.run = Run(
            kit,
            runner=runner,
            outcomes=self.outcomes,
            settler=settler,
            overdue=Overdue(kit, outcomes=self.outcomes, answers=answers),
            features=features,
        )
        self.begin = Begin(kit, run=self.run, outcomes=self.outcomes, settler=settler)

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
