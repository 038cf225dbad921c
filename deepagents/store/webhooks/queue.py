"""The Redis side of webhooks: one stream per endpoint of the deliveries still to make
(``{prefix}:wh:<endpoint>``), read through the ``deliver`` consumer group, acked and
deleted once the endpoint took them; and each endpoint's delivery status (a hash) that the
exporter's gauges and the console read.

A delivered entry is deleted, so a stream's length is exactly the endpoint's backlog.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson
import redis.exceptions as rex
from redis.asyncio import Redis, RedisCluster

from deepagents.store.audit.outbox import _autoclaim, _entries
from deepagents.store.webhooks.events import Delivery
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams.errors import redis_errors

GROUP = "deliver"
_ACK_DELETE = """
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return redis.call('XDEL', KEYS[1], ARGV[2])
"""


@dataclass(frozen=True, slots=True)
class Pending:
    """One delivery read from an endpoint's stream."""

    entry_id: str
    event_id: str
    body: bytes


@dataclass(frozen=True, slots=True)
class EndpointStatus:
    """What the dispatcher last saw of an endpoint, and its backlog."""

    endpoint: str
    backlog: int
    delivered_ms: int | None = None  # the last delivery the endpoint took
    failing_since_ms: int | None = None  # the first failed attempt of the current delivery
    attempts: int = 0  # failed attempts of the current delivery
    error: str | None = None  # the last attempt's failure

    def failing_s(self, now_ms: int | None = None) -> float:
        """How long the endpoint has been failing; 0 while it takes deliveries."""
        if self.failing_since_ms is None:
            return 0.0
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return max(0.0, (now - self.failing_since_ms) / 1000)


class WebhookQueue:
    def __init__(self, client: Redis | RedisCluster, keys: Keys) -> None:
        self.client: Any = client
        self.keys = keys

    async def enqueue(self, deliveries: Iterable[Delivery]) -> int:
        """XADD each delivery to its endpoint's stream (one pipeline); how many."""
        n = 0
        with redis_errors("queue webhook deliveries"):
            pipe = self.client.pipeline(transaction=False)
            for d in deliveries:
                pipe.xadd(self.keys.webhook(d.endpoint), {"id": d.event_id, "body": d.body})
                n += 1
            if n:
                await pipe.execute()
        return n

    async def ensure_group(self, endpoint: str) -> None:
        with redis_errors("create the webhook group"):
            try:
                await self.client.xgroup_create(
                    self.keys.webhook(endpoint), GROUP, id="0", mkstream=True
                )
            except rex.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    async def claim_all(self, endpoint: str, consumer: str) -> int:
        """Take every pending delivery of the endpoint (a previous holder's, dead or not):
        called by the lease's new holder, the only one delivering from now on."""
        stream, start, n = self.keys.webhook(endpoint), "0-0", 0
        while True:
            with redis_errors("claim webhook deliveries"):
                reply = await self.client.xautoclaim(stream, GROUP, consumer, 0, start, count=500)
            start, claimed, _ = _autoclaim(reply)
            n += len(claimed)
            if start in ("0-0", b"0-0"):
                return n

    async def read(self, endpoint: str, consumer: str, count: int) -> list[Pending]:
        """This consumer's pending deliveries first (a retry interrupted by a restart), else
        new ones; in stream order. Never blocks."""
        stream = self.keys.webhook(endpoint)
        with redis_errors("read webhook deliveries"):
            for cursor in ("0", ">"):
                reply = await self.client.xreadgroup(GROUP, consumer, {stream: cursor}, count=count)
                found = [
                    Pending(eid, _text(fields.get(b"id", b"")), fields.get(b"body", b""))
                    for _, eid, fields in _entries(reply)
                    if fields  # a pending entry deleted meanwhile reads as empty
                ]
                if found:
                    return found
        return []

    async def ack(self, endpoint: str, entry_id: str) -> None:
        with redis_errors("ack a webhook delivery"):
            await self.client.eval(_ACK_DELETE, 1, self.keys.webhook(endpoint), GROUP, entry_id)

    async def set_status(self, status: EndpointStatus) -> None:
        value = orjson.dumps(
            {
                "delivered_ms": status.delivered_ms,
                "failing_since_ms": status.failing_since_ms,
                "attempts": status.attempts,
                "error": status.error,
            }
        )
        with redis_errors("write a webhook status"):
            await self.client.hset(self.keys.webhook_status, status.endpoint, value)

    async def statuses(self, endpoints: Iterable[str]) -> list[EndpointStatus]:
        """Each endpoint's status and backlog (a never-used endpoint: empty, no status)."""
        names = list(endpoints)
        if not names:
            return []
        with redis_errors("read webhook statuses"):
            pipe = self.client.pipeline(transaction=False)
            for name in names:
                pipe.xlen(self.keys.webhook(name))
            lengths = await pipe.execute()
            raw = await self.client.hmget(self.keys.webhook_status, names)
        out = []
        for name, length, value in zip(names, lengths, raw, strict=True):
            doc = _doc(value)
            out.append(
                EndpointStatus(
                    name,
                    int(length or 0),
                    delivered_ms=_int(doc.get("delivered_ms")),
                    failing_since_ms=_int(doc.get("failing_since_ms")),
                    attempts=_int(doc.get("attempts")) or 0,
                    error=doc["error"] if isinstance(doc.get("error"), str) else None,
                )
            )
        return out


def _doc(value: bytes | None) -> dict[str, Any]:
    if not value:
        return {}
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value
