"""Liveness, apart from the visibility timeout: each worker writes its registry heartbeat
every ``liveness_ms`` and watches its peers'. A peer whose heartbeat has not moved for
``dead_after_ms`` (a few missed beats) is dead: the entries it holds on this worker's
streams are made claimable at once (``TaskQueue.expose``) and this worker's readers
reclaim them on their next turn, through the ordinary reclaim. A task in flight on a
killed worker resumes in seconds, not after the visibility timeout.

Death is judged by this worker's own monotonic clock watching the peer's value change,
never by comparing the peer's clock with this one: a skewed clock cannot make a live
peer look dead. A peer that was only paused is judged dead too, and fenced as any
reclaimed owner is (docs/design.md, "A dead worker noticed in seconds")."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from deepagents.errors import TransportError
from deepagents.store.base import Registry
from deepagents.transport.base import StreamRef, TaskQueue
from deepagents.worker.delivery_kit import DeliveryKit

log = logging.getLogger("deepagents.worker")
# Peers' heartbeats are read this many times per beat: one HGETALL each, and a death is
# seen at most a quarter of a beat late.
CHECKS = 4


@dataclass(slots=True)
class _Seen:
    beat: int  # the value last read
    since: float  # monotonic time it was first read with that value
    exposed: bool = False  # its entries were made claimable at this value


class PeerWatch:
    """Which peers have gone silent, from successive reads of the registry's heartbeats."""

    def __init__(self, me: str, dead_after_s: float) -> None:
        self.me = me
        self.dead_after_s = dead_after_s
        self._seen: dict[str, _Seen] = {}

    def silent(self, beats: dict[str, int], now: float) -> list[tuple[str, float]]:
        """Peers silent for ``dead_after_s`` whose entries were not exposed yet at this
        heartbeat, with how long they have been silent. A peer that beats again, or a
        new one, is watched afresh; one gone from the registry is forgotten."""
        for gone in set(self._seen) - set(beats):
            del self._seen[gone]
        out = []
        for peer, beat in beats.items():
            if peer == self.me:
                continue
            seen = self._seen.get(peer)
            if seen is None or seen.beat != beat:
                self._seen[peer] = _Seen(beat, now)
                continue
            silent_for = now - seen.since
            if not seen.exposed and silent_for >= self.dead_after_s:
                out.append((peer, silent_for))
        return out

    def exposed(self, peer: str) -> None:
        seen = self._seen.get(peer)
        if seen is not None:
            seen.exposed = True


class Liveness:
    """The loop: beat, read the peers' beats, expose the dead ones' entries."""

    def __init__(
        self,
        kit: DeliveryKit,
        *,
        registry: Registry,
        streams: Sequence[StreamRef],
        wake: Callable[[StreamRef], None],
        reached: Callable[[], None],
    ) -> None:
        """``wake``: a dead peer's entries in the stream are claimable now; ``reached``:
        the registry took this worker's beat."""
        settings, consumer = kit.agent_settings, kit.consumer
        self.agent, self.consumer, self.registry = kit.agent, consumer, registry
        self.bus: TaskQueue = kit.bus
        self.streams = streams
        # A dead peer's entries become claimable as if their visibility timeout had passed.
        self.visibility_timeout_ms = settings.visibility_timeout_ms
        self.interval_s = settings.liveness_ms / 1000
        self.watch = PeerWatch(consumer, settings.dead_after_ms / 1000)
        self.wake, self.reached = wake, reached

    async def run(self, stopping: Callable[[], bool]) -> None:
        """Beat every interval; watch the peers CHECKS times as often, since a peer's
        silence is timed from when this worker first read its last value."""
        turn = 0
        while not stopping():
            await asyncio.sleep(self.interval_s / CHECKS)
            try:
                if turn % CHECKS == 0:
                    await self.registry.beat(self.agent, self.consumer)
                    self.reached()
                await self.check()
            except TransportError as exc:
                log.warning("heartbeat failed: %s", exc, extra={"action": "heartbeat_failed"})
            turn += 1

    async def check(self) -> None:
        beats = await self.registry.last_beats(self.agent.name)
        for peer, silent_for in self.watch.silent(beats, time.monotonic()):
            await self._reclaim(peer, silent_for)

    async def _reclaim(self, peer: str, silent_for: float) -> None:
        """Every stream of this worker's: the dead peer's entries claimable now."""
        total = 0
        for ref in self.streams:
            n = await self.bus.expose(ref, self.agent.name, peer, self.visibility_timeout_ms)
            if n:
                total += n
                self.wake(ref)
        self.watch.exposed(peer)
        if total:
            log.warning(
                "consumer %s is dead (no registry heartbeat for %.1f s): reclaiming its %d "
                "pending entries now",
                peer,
                silent_for,
                total,
                extra={"action": "dead_consumer_reclaimed", "dead_consumer": peer},
            )
