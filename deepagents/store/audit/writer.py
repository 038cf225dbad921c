"""The audit writer: drains every outbox stream into PostgreSQL, effectively once.

Loop: collect a batch (bounded by ``batch_size`` events and ``batch_wait_ms``), map and
redact it, COPY it (duplicates skipped by event id), and only after the commit XACK+XDEL
its entries. A crash anywhere before the ack leaves the entries pending: they are re-read
at restart (own pending, id ``0``) or reclaimed by another writer (XAUTOCLAIM), and the
insert skips what was already stored. While PostgreSQL is down the writer holds its batch,
retries with capped exponential backoff, and reads nothing more: the events wait in Redis
and ``backlog()`` shows how many.

Embeddable: ``AuditWriter(client, settings=..., config=...)``, then ``await run()`` in a
task and ``stop()``. It owns its PostgreSQL connection and closes it when ``run`` ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from redis.asyncio import Redis, RedisCluster

from deepagents.config import FileConfig, Settings
from deepagents.errors import GroupVanished, TransportError
from deepagents.store.audit.db import database_url
from deepagents.store.audit.decode import BatchDecoder
from deepagents.store.audit.errors import AuditUnavailable
from deepagents.store.audit.events import Row
from deepagents.store.audit.migrate import migrate
from deepagents.store.audit.outbox import Backlog, Entry, Outbox
from deepagents.store.audit.retention import Maintenance
from deepagents.store.audit.sink import PgSink
from deepagents.transport.keys import Keys

if TYPE_CHECKING:
    from deepagents.store.webhooks import WebhookDispatcher, WebhookQueue

log = logging.getLogger("deepagents.audit")
T = TypeVar("T")

FAULT_ENV = "DEEPAGENTS_FAULT"  # test hook: "crash_after_commit" kills the process (SIGKILL)
BACKOFF_MIN_S = 0.1
BACKOFF_MAX_S = 5.0
IDLE_BLOCK_MS = 1_000  # with nothing to do, block this long per read (bounds stop latency)


@dataclass
class WriterStats:
    batches: int = 0
    events: int = 0  # events written (new rows)
    duplicates: int = 0  # events skipped as already stored (redeliveries)
    entries: int = 0  # outbox entries acked
    reclaimed: int = 0
    db_failures: int = 0
    redis_failures: int = 0


class AuditWriter:
    def __init__(
        self,
        client: Redis | RedisCluster,
        *,
        settings: Settings,
        config: FileConfig,
        dsn: str | None = None,
        consumer: str | None = None,
        run_migrations: bool = True,
        scan_s: float = 30.0,
        deliver_webhooks: bool = True,
    ) -> None:
        self.settings = settings
        self.url = dsn or database_url(settings)
        self.schema = settings.audit_schema
        self.batch_size = settings.audit_batch_size
        self.batch_wait_s = settings.audit_batch_wait_ms / 1000
        self.claim_idle_ms = settings.audit_claim_idle_ms
        self.run_migrations = run_migrations
        self.outbox = Outbox(
            client,
            Keys(settings.prefix),
            config,
            consumer or settings.consumer_name(),
            scan_s=scan_s,
        )
        self.sink = PgSink(
            self.url,
            self.schema,
            lock_timeout_ms=settings.audit_lock_timeout_ms,
            statement_timeout_ms=settings.audit_statement_timeout_ms,
        )
        self.decoder = BatchDecoder.from_settings(settings)
        self.maintenance = Maintenance(settings.audit_retention_days)
        self.stats = WriterStats()
        # Webhooks: queued here after the commit (their events are then stored, redacted,
        # and ordered), delivered by a dispatcher beside the drain loop, never in its way.
        self.webhooks = dict(config.webhooks)
        self.webhook_queue: WebhookQueue | None = None
        self.dispatcher: WebhookDispatcher | None = None
        if self.webhooks:
            # Imported here: the webhooks' modules read the audit events this package defines.
            from deepagents.store.webhooks import WebhookDispatcher, WebhookQueue

            keys = Keys(settings.prefix)
            self.webhook_queue = WebhookQueue(client, keys)
            if deliver_webhooks:
                name = consumer or settings.consumer_name()
                self.dispatcher = WebhookDispatcher(client, keys, self.webhooks, name)
        self.ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._next_claim = 0.0
        self._inflight: asyncio.Task[None] | None = None

    # lifecycle ----------------------------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()
        if self.dispatcher is not None:
            self.dispatcher.stop()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    async def backlog(self) -> Backlog:
        """Events waiting in Redis (read-not-committed + unread); the backlog metric."""
        return await self.outbox.backlog()

    async def run(self) -> None:
        delivering = None
        if self.dispatcher is not None:
            delivering = asyncio.create_task(self.dispatcher.run(), name="webhooks")
        try:
            await self._start()
            while not self.stopping:
                await self._step()
            await self._settle()
        finally:
            if self._inflight is not None:
                self._inflight.cancel()  # only on an error: its entries stay pending
                await asyncio.gather(self._inflight, return_exceptions=True)
            if delivering is not None:
                self.dispatcher.stop()  # type: ignore[union-attr]
                await asyncio.gather(delivering, return_exceptions=True)
            await self.sink.close()

    async def _start(self) -> None:
        if self.run_migrations:
            await self._retry("migrate", lambda: migrate(self.url, self.schema))
        await self._retry("discover outbox streams", lambda: self.outbox.discover(force=True))
        self.ready.set()
        log.info("audit writer %s draining %d outbox streams into schema %s",
                 self.outbox.consumer, len(self.outbox.streams), self.schema)  # fmt: skip
        # Entries this consumer read before a crash and never acked come first.
        async for chunk in self.outbox.own_pending(self.batch_size):
            await self._submit(chunk)
            if self.stopping:
                return

    async def _step(self) -> None:
        try:
            await self.outbox.discover()
            await self._reclaim_if_due()
            batch = await self._collect()
        except GroupVanished:
            await self._retry("re-create groups", self.outbox.recreate_groups)
            return
        except TransportError as exc:
            self.stats.redis_failures += 1
            log.warning("audit writer: Redis failed (%s); retrying", exc)
            await self._sleep(BACKOFF_MAX_S / 5)
            return
        if batch:
            await self._submit(batch)
        if self.maintenance.due():
            await self._settle()  # maintenance shares the sink's one connection
            await self.maintenance.run(self.sink)

    # batches ------------------------------------------------------------------------------

    async def _collect(self) -> list[Entry]:
        """Read until the batch is full, or ``batch_wait`` passed since its first entry."""
        if not self.outbox.streams:
            # No agent has written an outbox stream yet: wait for discovery, don't spin.
            await self._sleep(IDLE_BLOCK_MS / 1000)
            return []
        batch: list[Entry] = []
        events = 0
        deadline: float | None = None
        while events < self.batch_size and not self.stopping:
            if deadline is None:
                block_ms = IDLE_BLOCK_MS
            else:
                block_ms = int((deadline - time.monotonic()) * 1000)
                if block_ms <= 0:
                    break
            per_stream = max(1, (self.batch_size - events) // max(1, len(self.outbox.streams)))
            entries = await self.outbox.read(per_stream, block_ms)
            if not entries:
                if batch or deadline is None:
                    break
                continue
            batch.extend(entries)
            events += sum(_event_count(e) for e in entries)
            deadline = deadline or time.monotonic() + self.batch_wait_s
        return batch

    async def _reclaim_if_due(self) -> None:
        now = time.monotonic()
        if now < self._next_claim:
            return
        self._next_claim = now + max(0.5, self.claim_idle_ms / 2000)
        claimed = await self.outbox.reclaim(self.claim_idle_ms, self.batch_size)
        if claimed:
            self.stats.reclaimed += len(claimed)
            log.info("reclaimed %d stale audit entries", len(claimed))
            await self._submit(claimed)

    async def _submit(self, entries: list[Entry]) -> None:
        """Map ``entries`` while the previous batch is written, then start writing them.

        One batch in flight at most: mapping (Python, this core) overlaps the previous
        COPY (PostgreSQL, another core), and memory stays bounded to two batches.
        """
        rows = self.decoder.rows(entries)
        await self._settle()
        self._inflight = asyncio.create_task(self._write(entries, rows))

    async def _settle(self) -> None:
        task, self._inflight = self._inflight, None
        if task is not None:
            await task

    async def _write(self, entries: list[Entry], rows: list[Row]) -> None:
        """Commit then ack. Returns without acking only when stopping (entries stay pending)."""
        stored = await self._retry("write audit batch", lambda: self.decoder.store(self.sink, rows))
        if stored is None:
            return
        self.stats.batches += 1
        self.stats.events += stored
        self.stats.duplicates += len(rows) - stored
        _fault("crash_after_commit")
        if self.webhook_queue is not None:
            from deepagents.store.webhooks import deliveries

            queue, hooks = self.webhook_queue, self.webhooks
            # Before the ack: a crash in between queues them again (at least once).
            if (
                await self._retry("queue webhooks", lambda: queue.enqueue(deliveries(hooks, rows)))
                is None
            ):
                return
        if await self._retry("ack audit entries", lambda: self._ack(entries)):
            self.stats.entries += len(entries)

    async def _ack(self, entries: list[Entry]) -> bool:
        await self.outbox.ack(entries)
        return True

    # retry --------------------------------------------------------------------------------

    async def _retry(self, what: str, action: Callable[[], Awaitable[T]]) -> T | None:
        """Run ``action`` until it succeeds; None when stopped first. Backoff is capped."""
        delay = BACKOFF_MIN_S
        while True:
            try:
                return await action()
            except (AuditUnavailable, TransportError) as exc:
                if isinstance(exc, AuditUnavailable):
                    self.stats.db_failures += 1
                else:
                    self.stats.redis_failures += 1
                log.warning("%s failed, retrying in %.1f s: %s", what, delay, exc)
            if self.stopping or await self._sleep(delay):
                return None
            delay = min(BACKOFF_MAX_S, delay * 2) * random.uniform(0.8, 1.0)

    async def _sleep(self, seconds: float) -> bool:
        """Sleep unless stopped; True when stopped."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)
        return self.stopping


def _event_count(entry: Entry) -> int:
    raw = entry[2].get(b"events", b"")
    return max(1, raw.count(b'"event_id"'))  # cheap estimate; exact count is not needed here


def _fault(point: str) -> None:
    """Crash on purpose at ``point`` when the test hook asks for it (kill -9 semantics)."""
    if os.environ.get(FAULT_ENV) == point:
        log.error("fault injection: %s, killing the process", point)
        os.kill(os.getpid(), signal.SIGKILL)


__all__ = ["AuditWriter", "Backlog", "WriterStats"]
