"""The Redis side of the audit writer: find every outbox stream, read it through the
``audit`` consumer group, reclaim stale entries, ack+delete after commit, report backlog.

Streams are found two ways: the agent registry (``{prefix}:agents``) times the shard
count the config gives each agent (cheap, every ``discover_s``), and a SCAN for
``{prefix}:{*}:audit`` (catches agents missing from the registry or with other shard
counts, e.g. a task submitted before any worker started; every ``scan_s``, since a SCAN
walks the whole keyspace).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import redis.exceptions as rex
from redis.asyncio import Redis, RedisCluster

from deepagents.config import FileConfig
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams.errors import redis_errors

log = logging.getLogger("deepagents.audit")

GROUP = "audit"
# An idle read polls again after a pause that doubles from the first to the last: new
# events wait at most this long to be seen (then up to ``audit_batch_wait_ms`` to batch).
POLL_MIN_S = 0.005
POLL_MAX_S = 0.1
# KEYS[1] an outbox stream; ARGV[1] the group, ARGV[2..] entry ids. In chunks: Lua's
# unpack() has a limit on how many values it may return.
_ACK_DELETE = """
for i = 2, #ARGV, 1000 do
  local j = math.min(i + 999, #ARGV)
  redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, i, j))
  redis.call('XDEL', KEYS[1], unpack(ARGV, i, j))
end
return 1
"""
Entry = tuple[str, str, dict[bytes, bytes]]  # (stream, entry id, fields)


@dataclass(frozen=True, slots=True)
class Backlog:
    """Audit events waiting in Redis: read but not yet committed, and not yet read."""

    pending: int
    unread: int
    streams: int

    @property
    def total(self) -> int:
        return self.pending + self.unread


@dataclass
class Outbox:
    client: Redis | RedisCluster  # every command stays in one slot
    keys: Keys
    config: FileConfig
    consumer: str
    discover_s: float = 1.0
    scan_s: float = 30.0
    streams: set[str] = field(default_factory=set)
    _next_discover: float = 0.0
    _next_scan: float = 0.0

    # discovery ----------------------------------------------------------------------------

    async def discover(self, *, force: bool = False) -> set[str]:
        """Refresh the set of outbox streams (on schedule, or now); return the new ones."""
        now = time.monotonic()
        found: set[str] = set()
        if force or now >= self._next_discover:
            found |= await self._from_registry()
            self._next_discover = now + self.discover_s
        if force or now >= self._next_scan:
            found |= await self._from_scan()
            self._next_scan = now + self.scan_s
        new = found - self.streams
        for stream in sorted(new):
            await self._create_group(stream)
        self.streams |= new
        return new

    async def _from_registry(self) -> set[str]:
        with redis_errors("read agent registry"):
            names = await self.client.smembers(self.keys.agents_index)
        out = set()
        for raw in names:
            agent = raw.decode() if isinstance(raw, bytes) else str(raw)
            for shard in range(self.config.agent_settings(agent).shards):
                out.add(self.keys.shard(agent, shard).outbox)
        return out

    async def _from_scan(self) -> set[str]:
        # The prefix is restricted to [A-Za-z0-9_-] by Settings: no glob characters.
        pattern = f"{self.keys.prefix}:{{*}}:audit"
        with redis_errors("scan outbox streams"):
            return {k.decode() async for k in self.client.scan_iter(match=pattern, count=1000)}

    async def _create_group(self, stream: str) -> None:
        # From id 0: events appended before the first writer ever ran are drained too.
        try:
            await self.client.xgroup_create(stream, GROUP, id="0", mkstream=True)
        except rex.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def recreate_groups(self) -> None:
        """After NOGROUP (a stream was deleted, or Redis restarted empty)."""
        log.warning("an outbox stream lost its consumer group; re-creating the groups")
        for stream in sorted(self.streams):
            with redis_errors("re-create audit group"):
                await self._create_group(stream)

    # reading ------------------------------------------------------------------------------

    async def read(self, count: int, block_ms: int) -> list[Entry]:
        """New entries of all streams (at most ``count`` per stream), waiting up to
        ``block_ms`` for some. One XREADGROUP per stream, pipelined: each shard's stream has
        its own hash tag, and one command over several would span slots, which Redis
        Cluster refuses. So no command can block on them all: with nothing new, the read
        is tried again after a pause that doubles from ``POLL_MIN_S`` to ``POLL_MAX_S``."""
        if not self.streams:
            return []
        deadline = time.monotonic() + block_ms / 1000
        pause = POLL_MIN_S
        while True:
            with redis_errors("read outbox"):
                pipe = self.client.pipeline(transaction=False)
                for stream in sorted(self.streams):
                    pipe.xreadgroup(GROUP, self.consumer, {stream: ">"}, count=count)
                replies = await pipe.execute()
            entries = [entry for reply in replies for entry in _entries(reply)]
            left = deadline - time.monotonic()
            if entries or left <= 0:
                return entries
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, POLL_MAX_S)

    async def own_pending(self, count: int) -> AsyncIterator[list[Entry]]:
        """Entries this consumer read before a restart but never acked (id ``0``, not ``>``)."""
        for stream in sorted(self.streams):
            cursor = "0"
            while True:
                with redis_errors("read own pending"):
                    reply = await self.client.xreadgroup(
                        GROUP, self.consumer, {stream: cursor}, count=count
                    )
                entries = _entries(reply)
                if not entries:
                    break
                cursor = entries[-1][1]
                yield entries

    async def reclaim(self, min_idle_ms: int, count: int) -> list[Entry]:
        """Take over entries idle longer than ``min_idle_ms`` (a writer that died)."""
        out: list[Entry] = []
        for stream in sorted(self.streams):
            start = "0-0"
            while len(out) < count:
                with redis_errors("reclaim audit entries"):
                    reply = await self.client.xautoclaim(
                        stream, GROUP, self.consumer, min_idle_ms, start, count=count
                    )
                start, claimed, gone = _autoclaim(reply)
                out.extend((stream, eid, fields) for eid, fields in claimed)
                if gone:
                    # Pending yet deleted: cannot happen through us (ack and delete are one
                    # MULTI); someone trimmed the stream. Say so loudly, never silently.
                    log.error("%d audit entries of %s were deleted before being written: %s",
                              len(gone), stream, gone[:5])  # fmt: skip
                if start in ("0-0", b"0-0"):
                    break
        return out

    # after commit -------------------------------------------------------------------------

    async def ack(self, entries: list[Entry]) -> None:
        """XACK + XDEL, atomically per stream (one script call each, in one pipeline):
        acked entries never linger unacked-deleted, and no call spans two slots."""
        by_stream: dict[str, list[str]] = {}
        for stream, entry_id, _ in entries:
            by_stream.setdefault(stream, []).append(entry_id)
        with redis_errors("ack audit entries"):
            pipe = self.client.pipeline(transaction=False)
            for stream, ids in by_stream.items():
                # EVAL, not EVALSHA: one call per stream and batch, and never a NOSCRIPT.
                pipe.eval(_ACK_DELETE, 1, stream, GROUP, *ids)
            await pipe.execute()

    async def backlog(self) -> Backlog:
        """Acked entries are deleted, so a stream's length is exactly what is still to write."""
        streams = sorted(self.streams)
        if not streams:
            return Backlog(0, 0, 0)
        with redis_errors("measure audit backlog"):
            pipe = self.client.pipeline(transaction=False)
            for stream in streams:
                pipe.xlen(stream)
                pipe.xpending(stream, GROUP)
            replies = await pipe.execute(raise_on_error=False)
        total = pending = 0
        for length, summary in zip(replies[::2], replies[1::2], strict=True):
            total += length if isinstance(length, int) else 0
            pending += int(summary.get("pending", 0)) if isinstance(summary, dict) else 0
        return Backlog(pending, max(0, total - pending), len(streams))


def _entries(reply: Any) -> list[Entry]:
    out: list[Entry] = []
    items = reply.items() if isinstance(reply, dict) else (reply or [])
    for stream, messages in items:
        name = stream.decode() if isinstance(stream, bytes) else str(stream)
        if isinstance(messages, list) and messages and isinstance(messages[0], list):
            messages = messages[0]  # RESP3 shape
        for entry_id, fields in messages:
            eid = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
            out.append((name, eid, fields or {}))
    return out


def _autoclaim(reply: Any) -> tuple[str, list[tuple[str, dict[bytes, bytes]]], list[Any]]:
    start = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
    claimed = []
    for item in reply[1]:
        if item is None:
            continue
        entry_id, fields = item
        eid = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
        claimed.append((eid, fields or {}))
    gone = list(reply[2]) if len(reply) > 2 else []
    return start, claimed, gone
