"""Delivering webhooks: one loop per endpoint, in its stream's order, each delivery retried
with capped exponential backoff (and jitter) until the endpoint answers 2xx, then acked.

At most one process delivers to an endpoint at a time (a lease in Redis, renewed while it
works): the deliveries keep their order and one backoff clock, however many audit writers
run. A new holder first claims the pending deliveries of the previous one, so a delivery a
crash interrupted is made again: at least once, the event id telling a repeat. A dead
endpoint holds up only its own stream; its status says since when and why (the exporter's
gauges and the console read it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Mapping
from typing import Any

from redis.asyncio import Redis, RedisCluster

from deepagents.config.webhooks import WebhookConfig
from deepagents.contract.webhooks import EVENT_ID_HEADER, SIGNATURE_HEADER, signature_header
from deepagents.errors import TransportError
from deepagents.store.lease import RedisLease
from deepagents.store.webhooks.queue import EndpointStatus, Pending, WebhookQueue
from deepagents.transport.keys import Keys

log = logging.getLogger("deepagents.webhooks")

LEASE_MS = 10_000
BATCH = 50  # deliveries read at once per endpoint
POLL_MIN_S = 0.05  # an idle endpoint's stream is read again after a pause doubling to
POLL_MAX_S = 0.5  # ... this (no blocking read: it would hold a pooled connection)
_ERROR_CHARS = 300


class WebhookDispatcher:
    """``await run()`` in a task, ``stop()`` to end it. The secrets are read at construction
    (``ConfigError`` names a missing variable) and never logged."""

    def __init__(
        self,
        client: Redis | RedisCluster,
        keys: Keys,
        webhooks: Mapping[str, WebhookConfig],
        consumer: str,
        *,
        lease_ms: int = LEASE_MS,
    ) -> None:
        self.client = client
        self.queue = WebhookQueue(client, keys)
        self.keys = keys
        self.webhooks = dict(webhooks)
        self._secrets = {name: hook.secret(name) for name, hook in self.webhooks.items()}
        self.consumer = consumer
        self.lease_ms = lease_ms
        self.delivered = 0
        self.failures = 0
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    async def run(self) -> None:
        loops = [self._endpoint(name) for name in self.webhooks]
        await asyncio.gather(*loops)

    async def _endpoint(self, name: str) -> None:
        import httpx  # only a process that delivers webhooks loads it

        hook = self.webhooks[name]
        lease = RedisLease(
            self.client,  # type: ignore[arg-type]
            self.keys.webhook_lease(name),
            self.consumer,
            self.lease_ms,
            what=f"webhook {name}",
        )
        held, pause = False, POLL_MIN_S
        async with httpx.AsyncClient(timeout=hook.timeout_s, follow_redirects=False) as http:
            try:
                while not self.stopping:
                    try:
                        if not await lease.hold():
                            held = False
                            await self._sleep(self.lease_ms / 3000)
                            continue
                        if not held:
                            await self.queue.ensure_group(name)
                            await self.queue.claim_all(name, self.consumer)
                            held = True
                        batch = await self.queue.read(name, self.consumer, BATCH)
                        if not batch:
                            await self._sleep(pause)
                            pause = min(pause * 2, POLL_MAX_S)
                            continue
                        pause = POLL_MIN_S
                        for pending in batch:
                            if not await self._deliver(name, hook, http, lease, pending):
                                break  # stopping, or the lease went to another process
                            await self.queue.ack(name, pending.entry_id)
                    except TransportError as exc:
                        log.warning("webhook %s: Redis failed (%s); retrying", name, exc)
                        held = False
                        await self._sleep(1.0)
            finally:
                with contextlib.suppress(TransportError):
                    await lease.release()

    async def _deliver(
        self, name: str, hook: WebhookConfig, http: Any, lease: RedisLease, pending: Pending
    ) -> bool:
        """POST until a 2xx; False when stopped or the lease is lost first (the delivery
        stays pending: whoever holds the lease next makes it)."""
        attempt, failing_since = 0, None
        while not self.stopping:
            attempt += 1
            error = await self._post(name, http, pending, attempt)
            now_ms = int(time.time() * 1000)
            if error is None:
                self.delivered += 1
                await self.queue.set_status(EndpointStatus(name, 0, delivered_ms=now_ms))
                return True
            self.failures += 1
            failing_since = failing_since or now_ms
            await self.queue.set_status(
                EndpointStatus(
                    name,
                    0,
                    delivered_ms=await self._last_delivered(name),
                    failing_since_ms=failing_since,
                    attempts=attempt,
                    error=error,
                )
            )
            delay_ms = min(hook.retry_max_ms, hook.retry_base_ms * 2 ** min(attempt - 1, 30))
            delay_s = delay_ms / 1000 * random.uniform(0.5, 1.0)
            log.warning("webhook %s: delivery of event %s failed (attempt %d, %s); next in "
                        "%.1f s", name, pending.event_id, attempt, error, delay_s)  # fmt: skip
            if not await self._wait_holding(lease, delay_s):
                return False
        return False

    async def _post(self, name: str, http: Any, pending: Pending, attempt: int) -> str | None:
        """One attempt; None on a 2xx, else why it failed (no secret, no URL in it)."""
        import httpx

        headers = {
            "Content-Type": "application/json",
            "User-Agent": "deepagents-webhooks",
            EVENT_ID_HEADER: pending.event_id,
            "DeepAgents-Delivery-Attempt": str(attempt),
            SIGNATURE_HEADER: signature_header(self._secrets[name], pending.body),
        }
        try:
            response = await http.post(
                self.webhooks[name].url, content=pending.body, headers=headers
            )
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"[:_ERROR_CHARS] or type(exc).__name__
        if 200 <= response.status_code < 300:
            return None
        return f"HTTP {response.status_code}"

    async def _last_delivered(self, name: str) -> int | None:
        (status,) = await self.queue.statuses([name])
        return status.delivered_ms

    async def _wait_holding(self, lease: RedisLease, seconds: float) -> bool:
        """Sleep ``seconds`` renewing the lease; False when stopped or the lease is lost."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            if await self._sleep(min(left, self.lease_ms / 3000)):
                return False
            try:
                if not await lease.hold():
                    return False
            except TransportError:
                return False

    async def _sleep(self, seconds: float) -> bool:
        """Sleep unless stopped; True when stopped."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)
        return self.stopping
