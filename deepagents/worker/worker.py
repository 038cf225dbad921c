"""The worker: one process serves one agent type across its shards and tiers.

Side tasks, each supervised (if one dies, the worker stops rather than limp on):
- a reader per (tier, shard): takes slots from its tier's pool, then reads that many, and
  now and then reclaims entries idle past the visibility timeout (XAUTOCLAIM: dead workers);
- the heartbeat: keeps this worker's in-flight entries from going idle while they run;
- the delayed pump: moves due retries from the delayed sets into their streams;
- the committer: group commit of finished tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from deepagents.agentkit.configured import agent_chain, use_agent_chain
from deepagents.compose import RedisClient, Services, services_for
from deepagents.config.models import ModelConfig
from deepagents.config.placement import Placement, check_placement
from deepagents.config.schema import AgentSettings, FileConfig
from deepagents.config.settings import Settings
from deepagents.contract.agent import AgentContract
from deepagents.contract.codec import encode_result
from deepagents.contract.event_sink import event_sink
from deepagents.contract.events import AuditEvent
from deepagents.contract.result import ErrorCode, Result
from deepagents.contract.task import utcnow
from deepagents.errors import GroupVanished, TransportError
from deepagents.modelcall.bootstrap import model_calls_scope, simulator_models
from deepagents.modelcall.credentials import missing_credential
from deepagents.store.base import Registry
from deepagents.telemetry.core import Telemetry, process_telemetry
from deepagents.telemetry.modelcalls import ModelCallRecorder
from deepagents.tools.bootstrap import tool_calls_scope
from deepagents.transport.base import (
    RECLAIM_START,
    MessageBus,
    RawEntry,
    ReclaimCursor,
    StreamRef,
)
from deepagents.transport.keys import ShardKeys
from deepagents.worker.agent_calls import AgentRunner
from deepagents.worker.asking import Asks, wake_due
from deepagents.worker.assignment import NO_UPSTREAM, WHOLE, Assignment, Upstream
from deepagents.worker.context_features import ContextFeatures
from deepagents.worker.delegation import Delegations
from deepagents.worker.delivery import DeliveryHandler
from deepagents.worker.delivery_kit import DeliveryKit
from deepagents.worker.encode import Encoder
from deepagents.worker.flight import InFlight
from deepagents.worker.liveness import Liveness
from deepagents.worker.pools import TierPool
from deepagents.worker.quarantine import Quarantine
from deepagents.worker.settle import Settler
from deepagents.worker.stats import WorkerStats
from deepagents.worker.steps import StepBook
from deepagents.worker.stream_commits import Committer
from deepagents.worker.versioning import VersionTally, stream_version

log = logging.getLogger("deepagents.worker")

# How long a lower tier's reader waits for a higher tier's running tasks before reading
# anyway: strict priority under contention, without starving the lower tier.
YIELD_TO_HIGHER_S = 0.05


class Worker:
    """Run with ``await worker.run()``; ``stop()`` (idempotent, thread-safe) ends it gracefully."""

    def __init__(
        self,
        agent: AgentContract,
        *,
        services: Services,
        config: FileConfig,
        settings: Settings,
        telemetry: Telemetry | None = None,
        assignment: Assignment = WHOLE,
        upstream: Upstream = NO_UPSTREAM,
        owns_services: bool = False,
    ) -> None:
        self.agent = agent
        self.upstream = upstream
        self.telemetry = telemetry or process_telemetry()
        self.name = agent.name
        self.services = services
        self._owns_services = owns_services
        self.config = config
        self.settings = settings
        self.delegations = Delegations(
            services.bus,
            upstream.parentage,
            config.delegation.max_depth,
            round(config.delegation.sweep_s * 1000),
        )
        self.agent_settings: AgentSettings = config.agent_settings(agent.name)
        # Its middleware chain (YAML, then code), built here so a bad one stops the start.
        self.agent_chain = agent_chain(agent, agent.name, config)
        self.consumer = assignment.consumer or settings.consumer_name()
        self.keys = services.keys
        self.bus: MessageBus = services.bus
        self.stats = WorkerStats()
        sizes = {name: tier.concurrency for name, tier in config.tiers.items()}
        sizes.update(assignment.concurrency)
        self.pools = {name: TierPool(name, sizes[name]) for name in config.tier_names}
        self.inflight: dict[tuple[str, str], InFlight] = {}
        self.settler = Settler(self.pools, self.inflight, Quarantine())
        if self.telemetry.metrics is not None:
            for tier, pool in self.pools.items():
                self.telemetry.metrics.track_in_flight(self.name, tier, _active(pool))
        # What this worker reads (``--tiers``, ``--shards``); its delayed pump and its
        # reclaims cover the same shards and streams, nothing else. Under a rollout, of
        # this version's own streams only (worker/versioning.py).
        shards = self.agent_settings.shards
        self.placement = assignment.placement or Placement.everything(config.tier_names, shards)
        check_placement(self.placement, config.tier_names, shards)
        self.version = stream_version(config, agent)
        self.streams = [
            StreamRef(self.keys.shard(self.name, shard, self.version), tier)
            for tier in self.placement.tiers
            for shard in self.placement.shards
        ]
        # Streams holding a dead peer's entries, made claimable: reclaim there now.
        self._reclaim_now: set[str] = set()
        self.tally = self._version_tally()
        self.kit = DeliveryKit(
            agent=agent,
            agent_settings=self.agent_settings,
            config=config,
            settings=settings,
            consumer=self.consumer,
            bus=self.bus,
            stats=self.stats,
            encoder=Encoder(agent, self.consumer),
            metrics=self.telemetry.metrics,
            events=event_sink(settings.outbox),
        )
        self._stopping = False
        self._stop_event: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._executor: ThreadPoolExecutor | None = None
        self.ready = asyncio.Event()
        # Probes (/healthz, /readyz) read these from the metrics server's thread.
        beat_ms = self.agent_settings.heartbeat_ms or self.agent_settings.visibility_timeout_ms / 3
        self._beat_s = max(0.01, beat_ms / 1000)
        self._turned_at = time.monotonic()  # the heartbeat loop last turned (Redis or not)
        self._reached_at = -math.inf  # Redis last took this worker's registry heartbeat

    @classmethod
    def from_client(
        cls,
        agent: AgentContract,
        *,
        client: RedisClient,
        config: FileConfig,
        settings: Settings,
        telemetry: Telemetry | None = None,
        assignment: Assignment = WHOLE,
        upstream: Upstream = NO_UPSTREAM,
    ) -> Worker:
        """A worker over a client the caller opened and closes."""
        return cls(
            agent,
            services=services_for(client, settings),
            config=config,
            settings=settings,
            telemetry=telemetry,
            assignment=assignment,
            upstream=upstream,
            owns_services=True,
        )

    # lifecycle ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the worker to stop: stop reading, finish in-flight work within the grace period."""
        if self._loop is not None and self._stop_event is not None:
            self._loop.call_soon_threadsafe(self._stop_event.set)
        else:
            self._stopping = True

    def live(self) -> bool:
        """Alive: the event loop turns (its heartbeat ran within three periods). A Redis
        outage does not make a worker dead: restarting it would not bring Redis back."""
        return time.monotonic() - self._turned_at < 3 * self._beat_s + 1

    def accepting(self) -> bool:
        """Ready: reading its streams, not stopping, and Redis took its last heartbeat."""
        fresh = time.monotonic() - self._reached_at < 3 * self._beat_s + 1
        return self.ready.is_set() and not self._stopping and fresh

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        if self._stopping:
            return
        await self.bus.check_server()
        for ref in self.streams:
            await self.bus.ensure_group(ref, self.name)
        self._executor = ThreadPoolExecutor(
            max_workers=self.agent_settings.sync_threads, thread_name_prefix=f"da-{self.name}"
        )
        registry = self.services.registry
        runner = AgentRunner(self.agent, self._executor, self.telemetry.tracing)
        handler = self._delivery_handler(runner)
        committer = handler.committer
        models = self.config.models
        if self.settings.sim_model_url:
            models = simulator_models(models, self.settings.sim_model_url)
        _warn_missing_credentials(models)
        # Every model-call attempt into metrics and a span under the task's execute span.
        on_record = ModelCallRecorder(self.telemetry, self.name)
        try:
            await registry.register(self.agent, self.consumer)
            await registry.record_reads(self.name, self.consumer, self.placement)
            self._turned_at = self._reached_at = time.monotonic()
            await self._check_health(runner, registry)  # healthy or not, known from the start
            # One model-call client for this loop; every task created inside inherits it.
            # And one for tool calls: the fleet's breakers, the agent's MCP servers' sessions;
            # and the agent's middleware chain, which run_tools picks up.
            async with (
                model_calls_scope(
                    models, self.services.client, prefix=self.settings.prefix, on_record=on_record
                ),
                self._tool_calls(),
            ):
                with use_agent_chain(self.agent_chain):
                    await self._supervise(handler, committer, registry)
        finally:
            self._executor.shutdown(wait=False, cancel_futures=True)
            if self.tally is not None:  # what landed since the last flush
                await self.tally.flush()
            if self._owns_services:
                await self.services.aclose()
            await registry.deregister(self.agent, self.consumer)
            log.info(
                "worker stopped",
                extra={"action": "worker_stopped", "agent": self.name, "stats": self.stats},
            )

    def _delivery_handler(self, runner: AgentRunner) -> DeliveryHandler:
        """Its deliveries' steps, over what they all share (``delivery_kit.py``)."""
        kit = self.kit
        steps = StepBook(
            kit, executor=runner.executor, claims=self.services.claims, tracer=runner.tracer
        )
        asks = Asks(
            self.bus,
            self.upstream.escalate,
            self.config.asks.escalation_intent,
            # as long as the orchestrator keeps a task's location (its location_ttl_s)
            records_ttl_s=self.settings.result_ttl_s + 7 * 86_400,
        )
        return DeliveryHandler(
            kit,
            settler=self.settler,
            runner=runner,
            features=ContextFeatures(steps, asks, self.delegations),
            answers=self.services.answers,
            tally=self.tally,
        )

    def _tool_calls(self) -> contextlib.AbstractAsyncContextManager[object]:
        entry = self.config.agents.get(self.name)
        metrics = self.telemetry.metrics
        return tool_calls_scope(
            self.services.client,
            prefix=self.settings.prefix,
            mcp_servers=entry.mcp_servers if entry is not None else None,
            metrics=metrics.tool if metrics is not None else None,
            tracing=self.telemetry.tracing,
        )

    async def _supervise(
        self, handler: DeliveryHandler, committer: Committer, registry: Registry
    ) -> None:
        assert self._stop_event is not None
        commit_task = asyncio.create_task(committer.run(), name="committer")
        side = [
            asyncio.create_task(self._reader(ref, handler), name=f"reader:{ref.name}")
            for ref in self.streams
        ]
        side += [
            asyncio.create_task(self._heartbeat(handler), name="heartbeat"),
            asyncio.create_task(self._hear_cancels(handler), name="cancels"),
            asyncio.create_task(self._liveness(registry).run(self._stopped), name="liveness"),
            asyncio.create_task(self._delayed_pump(), name="delayed-pump"),
            asyncio.create_task(self._health_loop(handler.runner, registry), name="health"),
        ]
        if self.tally is not None:
            side.append(asyncio.create_task(self.tally.run(), name="version-tally"))
        stop_wait = asyncio.create_task(self._stop_event.wait(), name="stop-wait")
        self.ready.set()
        log.info(
            "worker started",
            extra={"action": "worker_started", "agent": self.name, "consumer": self.consumer},
        )
        done, _ = await asyncio.wait([stop_wait, commit_task, *side], return_when="FIRST_COMPLETED")
        failure = next(
            (t for t in done if t is not stop_wait and not t.cancelled() and t.exception()), None
        )
        self._stopping = True
        try:
            await self._drain(side, handler)
        finally:
            committer.close()
            await asyncio.wait_for(commit_task, timeout=10) if not commit_task.done() else None
            stop_wait.cancel()
        if failure is not None:
            raise failure.exception()  # type: ignore[misc]

    async def _drain(self, side: list[asyncio.Task[None]], handler: DeliveryHandler) -> None:
        """Graceful shutdown: readers finish their current block, in-flight work gets the
        grace period, the rest is handed back so others claim it at once."""
        readers = [t for t in side if t.get_name().startswith("reader:")]
        others = [t for t in side if t not in readers]
        for task in others:
            task.cancel()
        block = self.agent_settings.block_ms / 1000 + 2
        await asyncio.wait(readers, timeout=block) if readers else None
        for task in readers:
            task.cancel()
        running = {f.task for f in self.inflight.values() if f.task is not None}
        if running:
            await asyncio.wait(running, timeout=self.agent_settings.grace_period_s)
        await handler.stop()
        await asyncio.gather(*others, *readers, return_exceptions=True)

    # side tasks ---------------------------------------------------------------------------

    async def _reader(self, ref: StreamRef, handler: DeliveryHandler) -> None:
        """Owns one stream: this consumer's own pending entries first (a restart), then, in
        turn, stale entries of dead consumers (when due) and new entries. Reclaiming here,
        with the slots the reader holds, means a busy tier can never starve recovery."""
        pool, slots = self.pools[ref.tier], self.settler
        # A reader holds its slots while it blocks, so it may hold only its share of the
        # pool: the readers of the other shards of this tier must be able to read too. And
        # it asks for its share only while its stream has work (its last read found some):
        # otherwise it reads with one slot, so the readers of idle shards, blocked on their
        # streams, hold one slot each rather than their share, and a busy shard runs on the
        # rest instead of waiting out their blocking reads.
        share = -(-pool.capacity // len(self.placement.shards))
        batch = max(1, min(self.agent_settings.batch_size, share))
        active = False
        vis = self.agent_settings.visibility_timeout_ms
        interval = (self.agent_settings.reclaim_interval_ms or max(100, vis // 2)) / 1000
        next_reclaim = time.monotonic() + interval
        cursor = RECLAIM_START
        after: str | None = "0"
        backoff = _Backoff()
        higher = [
            self.pools[t] for t in self.config.tier_names[: self.config.tier_names.index(ref.tier)]
        ]
        # A fair tier's new entries come through its fair queue, moved in as they are read.
        read = self._new_entries(ref.tier)
        while not self._stopping:
            for urgent in higher:  # tiers are read in priority order: let urgent work run first
                await urgent.wait_idle(YIELD_TO_HIGHER_S)
            await handler.committer.room(ref.tier)
            n = await slots.take(ref.tier, batch if active else 1)
            fresh = False  # new entries ('>'), not a restart's own or a reclaim
            try:
                if after is not None:
                    entries = await self.bus.read_own_pending(
                        ref, self.name, self.consumer, n, after
                    )
                    after = entries[-1].entry_id if entries else None
                elif (start := self._reclaim_from(ref, next_reclaim, cursor)) is not None:
                    claimed = await self.bus.claim_stale(
                        ref, self.name, self.consumer, vis, n, start
                    )
                    cursor = claimed.cursor
                    if cursor.at_start:  # a full pass over the PEL: rest until the next one
                        next_reclaim = time.monotonic() + interval
                        await self._prune_consumers(ref)
                    if claimed.deleted:
                        await handler.payload_lost(ref, claimed.deleted)
                    entries = self._not_in_flight(ref, claimed.entries)
                    self.stats.reclaimed += len(entries)
                else:
                    entries = await read(
                        ref, self.name, self.consumer, n, self.agent_settings.block_ms
                    )
                    fresh = True
            except GroupVanished as exc:
                slots.give_back(ref.tier, n)
                await self._recreate_group(ref, exc, backoff)
                continue
            except TransportError as exc:
                slots.give_back(ref.tier, n)
                if not exc.retryable:
                    raise
                await backoff.wait(f"read {ref.name}", exc)
                continue
            backoff.reset()
            woke, active = not active, bool(entries)
            slots.give_back(ref.tier, n - len(entries))
            if entries:
                await handler.dispatch(ref, entries, fresh=fresh)
                if fresh and (len(entries) < n or woke):
                    # The stream is drained (or was, until this read woke with one slot),
                    # so the next read may block: the deliveries just begun start first, not
                    # after this reader has sent it: a lone task's latency from submit
                    # (docs/benchmarks.md, "Light-load latency").
                    await asyncio.sleep(0)

    def _new_entries(self, tier: str) -> Callable[..., Awaitable[list[RawEntry]]]:
        """How a tier's reader reads new entries: a fair tier's come through its fair
        queue, moved in as they are read (a key at its cap, if any, gets none)."""
        config = self.config.tiers[tier]
        if config.fair_share is None:
            return self.bus.read
        return functools.partial(self.bus.read_fair, cap=config.max_running_per_key)

    def _reclaim_from(
        self, ref: StreamRef, next_reclaim: float, cursor: ReclaimCursor
    ) -> ReclaimCursor | None:
        """Where a reclaim pass of the stream goes on from, or None when none is due. A
        dead peer's entries just made claimable (``_liveness``) start a pass now, from the
        start."""
        if ref.name in self._reclaim_now:
            self._reclaim_now.discard(ref.name)
            return RECLAIM_START
        return cursor if time.monotonic() >= next_reclaim else None

    def _not_in_flight(self, ref: StreamRef, entries: list[RawEntry]) -> list[RawEntry]:
        """Reclaimed entries less those this worker runs already. XAUTOCLAIM takes every
        entry idle past the visibility timeout, this consumer's own too: one whose
        heartbeat came late (a starved loop) would begin again here and run twice at once,
        both runs passing the owner checks, which cannot tell them apart. The claim reset
        its idle time, as a heartbeat would."""
        inflight = self.inflight
        mine = [e for e in entries if (ref.name, e.entry_id) in inflight]
        if not mine:
            return entries
        log.warning(
            "reclaimed %d of its own entries in flight on %s: its heartbeat came later than "
            "the visibility timeout; they go on running, once",
            len(mine),
            ref.name,
            extra={"action": "heartbeat_late", "stream": ref.name},
        )
        return [e for e in entries if (ref.name, e.entry_id) not in inflight]

    async def _prune_consumers(self, ref: StreamRef) -> None:
        """After a full reclaim pass, the dead consumers it emptied leave the group."""
        idle = self.agent_settings.consumer_idle_ms
        try:
            removed = await self.bus.prune_consumers(ref, self.name, self.consumer, idle)
        except TransportError as exc:  # housekeeping: the next pass tries again
            log.warning("pruning consumers failed: %s", exc, extra={"action": "prune_failed"})
            return
        if removed:
            log.info(
                "removed %d idle consumers with nothing pending from %s: %s",
                len(removed),
                ref.name,
                ", ".join(removed[:10]),
                extra={"action": "consumers_pruned", "stream": ref.name},
            )

    async def _recreate_group(self, ref: StreamRef, exc: GroupVanished, backoff: _Backoff) -> None:
        """The stream lost its consumer group: Redis lost its data (a restart without
        persistence, FLUSHALL) or someone deleted the stream. What was queued there is gone;
        what is enqueued from now on must still be served, so the group is created again,
        from the stream's start, and reading goes on."""
        log.error(
            "%s; re-creating it (tasks queued before are lost unless submitted again)",
            exc,
            extra={"action": "group_recreated", "stream": ref.name},
        )
        try:
            await self.bus.ensure_group(ref, self.name)
        except TransportError as again:
            await backoff.wait(f"re-create the group of {ref.name}", again)

    def _liveness(self, registry: Registry) -> Liveness:
        """Its registry heartbeat, and its dead peers' entries reclaimed (liveness.py)."""

        def reached() -> None:
            self._reached_at = time.monotonic()

        return Liveness(
            self.kit,
            registry=registry,
            streams=self.streams,
            wake=lambda ref: self._reclaim_now.add(ref.name),
            reached=reached,
        )

    def _stopped(self) -> bool:
        return self._stopping

    async def _heartbeat(self, handler: DeliveryHandler) -> None:
        """Its in-flight entries' idle times reset, so none is reclaimed from a live worker
        (its liveness in the registry is ``_liveness``'s)."""
        while not self._stopping:
            await asyncio.sleep(self._beat_s)
            self._turned_at = time.monotonic()
            by_stream: dict[StreamRef, list[InFlight]] = defaultdict(list)
            for flight in list(self.inflight.values()):
                by_stream[flight.stream].append(flight)
            try:
                for ref, flights in by_stream.items():
                    ids = [f.entry_id for f in flights]
                    for entry_id in await self.bus.touch(ref, self.name, self.consumer, ids):
                        handler.lost(ref, entry_id)
                    await self._cancelled_meanwhile(ref, flights, handler)
            except TransportError as exc:
                log.warning("heartbeat failed: %s", exc, extra={"action": "heartbeat_failed"})

    async def _cancelled_meanwhile(
        self, ref: StreamRef, flights: list[InFlight], handler: DeliveryHandler
    ) -> None:
        """The running tasks cancelled without this worker hearing of it (the cancel
        channel's message was lost while its connection was down) stop now."""
        running = [f.envelope.task.task_id for f in flights if not f.cancelled]
        if running:
            for task_id in await self.bus.cancelled(ref, running):
                handler.cancelled(task_id)

    async def _hear_cancels(self, handler: DeliveryHandler) -> None:
        """The agent's cancel channel: a running task cancelled (``cancel.lua`` publishes
        its id) stops here at once if it runs here. Pub/sub loses what is published while
        the connection is down; the heartbeat (``_heartbeat``) finds those too."""

        def heard(data: bytes) -> None:
            handler.cancelled(data.decode(errors="replace"))

        listener = self.bus.reply_listener(self.keys.cancel_channel(self.name), heard)
        try:
            try:
                await listener.open()
            except TransportError as exc:  # run() subscribes again, with backoff
                log.warning("cancel channel: %s", exc, extra={"action": "cancels_failed"})
            await listener.run()
        finally:
            await listener.aclose()

    async def _health_loop(self, runner: AgentRunner, registry: Registry) -> None:
        while not self._stopping:
            await asyncio.sleep(self.settings.health_interval_s)
            await self._check_health(runner, registry)

    async def _check_health(self, runner: AgentRunner, registry: Registry) -> None:
        """One ``health_check()``, bounded by the interval; raising or hanging is unhealthy.
        Recorded in the registry (the orchestrator and the exporter read it) and metrics."""
        detail = ""
        try:
            async with asyncio.timeout(self.settings.health_interval_s):
                ok = await runner.health_check()
        except Exception as exc:  # an agent's bug must not stop the worker: it is unhealthy
            log.warning("health check failed: %r", exc, extra={"action": "health_failed"})
            ok, detail = False, str(exc) or type(exc).__name__  # the registry keeps why
        if self.telemetry.metrics is not None:
            self.telemetry.metrics.health(self.name, ok)
        try:
            await registry.record_health(self.name, self.consumer, ok, detail)
        except TransportError as exc:
            log.warning("recording health failed: %s", exc, extra={"action": "health_failed"})

    def _version_tally(self) -> VersionTally | None:
        if not self.version or self.services.rollouts is None:
            return None
        return VersionTally(self.agent, self.config, self.services.rollouts, self.telemetry.metrics)

    async def _delayed_pump(self) -> None:
        """Promotes the delayed sets of the shards this worker reads, into every tier of
        them: a p0-only pool's tasks moved to p1 go through its shard's delayed set, and
        whoever reads p1 there takes them. A shard no worker reads is promoted by nobody:
        ``status`` and the exporter's readers gauge name it."""
        interval = min(0.2, self.agent_settings.retry.base_ms / 2000)
        shards = [self.keys.shard(self.name, s, self.version) for s in self.placement.shards]
        tiers = self.config.tier_names
        backoff = _Backoff()
        refused: dict[str, float] = {}  # delayed set -> when its refusal was last logged
        while not self._stopping:
            await asyncio.sleep(interval)
            try:
                for keys in shards:
                    await self._promote(keys, tiers, refused)
                backoff.reset()
            except TransportError as exc:  # Redis unreachable: every shard alike
                await backoff.wait("promote", exc)

    async def _promote(
        self, keys: ShardKeys, tiers: Sequence[str], refused: dict[str, float]
    ) -> None:
        try:
            promoted = await self.bus.promote_due(keys, tiers)
            if promoted.dead_lettered:
                self._poisoned(keys.delayed, promoted.dead_lettered)
            for task_id, error in promoted.damaged:
                await self._end_damaged(keys, task_id, error)
            if promoted.waits:  # questions whose wait ran out, parents whose sweep is due
                await wake_due(
                    self.bus,
                    keys,
                    tiers,
                    promoted.waits,
                    events=self.kit.events,
                    metrics=self.telemetry.metrics,
                    sweep=self.delegations.sweep,
                )
        except TransportError as exc:
            if exc.retryable:
                raise
            # A refusal that will not pass by itself (a damaged key: WRONGTYPE, say) stops
            # neither this worker nor the other shards' retries. It is logged as an error,
            # at most every 30 s per shard, until someone repairs the key.
            now = time.monotonic()
            if now - refused.get(keys.delayed, -_REFUSAL_LOG_S) >= _REFUSAL_LOG_S:
                refused[keys.delayed] = now
                log.error(
                    "cannot promote %s (its retries and waits stay there until it is repaired): %s",
                    keys.delayed,
                    exc,
                    extra={"action": "promote_refused"},
                )

    async def _end_damaged(self, keys: ShardKeys, task_id: str, error: str) -> None:
        """A task whose retry's member was damaged (dead-lettered by the promote script) ends
        dead with the reason, rather than staying 'retrying' with its submitter waiting."""
        reason = f"{ErrorCode.DECODE_ERROR}: its retry in the delayed set was damaged ({error})"
        result = Result.failed(
            ErrorCode.DEAD_LETTERED, reason, task_id=task_id, agent=self.name, finished_at=utcnow()
        )
        event = AuditEvent.of(
            "dead_lettered", task_id, agent=self.name, reason=ErrorCode.DECODE_ERROR, error=error
        )
        events = self.kit.events.keep([event])
        status = await self.bus.end_damaged(keys, task_id, encode_result(result), events)
        if status == "ok":
            log.warning(
                "task %s ended dead: %s",
                task_id,
                reason,
                extra={"action": "dead_lettered", "task_id": task_id, "reason": "decode_error"},
            )

    def _poisoned(self, delayed: str, n: int) -> None:
        """The promote script moved ``n`` members that were not delayed tasks to the
        dead-letter stream; the good ones behind them went on."""
        self.stats.dead_lettered += n
        if self.telemetry.metrics is not None:
            self.telemetry.metrics.decode_errors.labels(self.name, "delayed").inc(n)
        log.warning(
            "moved %d malformed members of %s to the dead-letter stream (decode_error)",
            n,
            delayed,
            extra={"action": "dead_lettered", "reason": "decode_error", "count": n},
        )


def _active(pool: TierPool) -> Callable[[], float]:
    return lambda: pool.active


_REFUSAL_LOG_S = 30.0


class _Backoff:
    """Capped exponential backoff for loops that wait out a Redis outage (no hot loop)."""

    def __init__(self, base: float = 0.05, cap: float = 2.0) -> None:
        self.base, self.cap, self.delay = base, cap, base
        self.last_log = 0.0

    async def wait(self, what: str, exc: Exception) -> None:
        now = time.monotonic()
        if now - self.last_log > 5:
            log.warning("%s failed, retrying: %s", what, exc, extra={"action": "transport_retry"})
            self.last_log = now
        await asyncio.sleep(self.delay)
        self.delay = min(self.delay * 2, self.cap)

    def reset(self) -> None:
        self.delay = self.base


def _warn_missing_credentials(models: Mapping[str, ModelConfig]) -> None:
    """Once per model at start: without this, every call fails into the model's fallback
    and only a per-call line in this log says why."""
    for name, model in models.items():
        if (missing := missing_credential(model)) is not None:
            log.warning(
                "model %r has no credential: %s; its calls will fail and be answered by its "
                "fallbacks (degraded)",
                name,
                missing,
                extra={"action": "model_credential_missing"},
            )
