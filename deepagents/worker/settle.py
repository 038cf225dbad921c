"""The one owner of a delivery's slot and of its place in the quarantine.

A reader takes slots here before it reads; every slot comes back here: unread, refused
(undecodable, a duplicate, begin failed), handed to the group commit, or settled. An
ordinary delivery enters the quarantine here before its begin and leaves it here when it
settles (``quarantine.py`` says why)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from deepagents.worker.flight import FlightState, InFlight
from deepagents.worker.pools import TierPool
from deepagents.worker.quarantine import Key, Quarantine


class Settler:
    def __init__(
        self,
        pools: dict[str, TierPool],
        inflight: dict[tuple[str, str], InFlight],
        quarantine: Quarantine,
    ) -> None:
        self._pools = pools
        self.inflight = inflight
        self.quarantine = quarantine

    # slots --------------------------------------------------------------------------------

    @property
    def capacities(self) -> dict[str, int]:
        """Each tier's slots."""
        return {name: pool.capacity for name, pool in self._pools.items()}

    async def take(self, tier: str, most: int) -> int:
        """Wait for a free slot of the tier; take up to ``most``."""
        return await self._pools[tier].take(most)

    def give_back(self, tier: str, n: int = 1) -> None:
        """Slots that carry no delivery: unread, or entries that never began here."""
        self._pools[tier].release(n)

    # the quarantine -----------------------------------------------------------------------

    async def admit(self, keys: list[Key]) -> None:
        """Ordinary deliveries about to be begun; they wait while a suspect waits or runs."""
        if not self.quarantine.try_enter(keys):
            await self.quarantine.enter(keys)

    def refuse(self, tier: str, keys: list[Key], *, ordinary: bool) -> None:
        """Admitted entries that did not begin here (begin failed, a duplicate, lost)."""
        self.give_back(tier, len(keys))
        if ordinary:
            self.quarantine.leave(*keys)

    @contextlib.asynccontextmanager
    async def alone(self) -> AsyncIterator[None]:
        async with self.quarantine.alone():
            yield

    # the lifecycle's ends -----------------------------------------------------------------

    def track(self, tier: str, flights: list[InFlight]) -> None:
        """Begun: in flight (the heartbeat keeps their entries) and active in their tier."""
        for flight in flights:
            self.inflight[(flight.stream.name, flight.entry_id)] = flight
        self._pools[tier].started(len(flights))

    def hand_over(self, flight: InFlight) -> None:
        """Its result goes to the group commit: the slot is free for the next task at once;
        the delivery stays active (lower tiers keep yielding to it) until the commit lands."""
        flight.move(FlightState.HANDED)
        self._pools[flight.stream.tier].release()

    def settle(self, flight: InFlight) -> None:
        """Over without a group commit (retried, dead-lettered, crashed, lost, handed back):
        it no longer counts as active, its slot is free, and a suspect may run (not before:
        a process dying with its outcome in the air charges it a delivery)."""
        self.settle_all([flight])
        self._pools[flight.stream.tier].release()

    def settle_all(self, flights: list[InFlight]) -> None:
        """Deliveries of one stream over at once: a committed batch, whose slots were freed
        when it was handed over (``hand_over``)."""
        inflight, ordinary = self.inflight, []
        for flight in flights:
            flight.move(FlightState.SETTLED)
            key = (flight.stream.name, flight.entry_id)
            inflight.pop(key, None)
            if flight.settled is not None:
                flight.settled.set()
            else:
                ordinary.append(key)
        if ordinary:
            self.quarantine.leave(*ordinary)
        self._pools[flights[0].stream.tier].finished(len(flights))
