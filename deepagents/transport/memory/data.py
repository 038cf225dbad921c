"""The in-process data a MemoryBus keeps: streams with consumer groups, task hashes, delayed
sets and plain records, with Redis's rules for ids, pending entries and expiry.

Nothing here awaits, so each bus operation built on it is atomic on the event loop, as a
script is on Redis."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field

from deepagents.transport.base import now_ms

Fields = dict[bytes, bytes]


def parse_id(entry_id: str) -> tuple[int, int]:
    """A stream id as Redis orders it; ``0`` and ``-`` are the lowest."""
    if entry_id in ("0", "-"):
        return (0, 0)
    ms, _, seq = entry_id.partition("-")
    return (int(ms), int(seq or 0))


@dataclass(slots=True)
class Pending:
    consumer: str
    delivered_ms: int
    count: int = 1


@dataclass(slots=True)
class Group:
    last: tuple[int, int] = (0, 0)
    # Insertion order is id order: entries join only when read as new, in id order.
    pel: dict[str, Pending] = field(default_factory=dict)
    seen_ms: dict[str, int] = field(default_factory=dict)  # consumer -> last interaction

    def deliver(self, entry_id: str, consumer: str, at: int) -> None:
        self.seen_ms[consumer] = at
        held = self.pel.get(entry_id)
        if held is None:
            self.pel[entry_id] = Pending(consumer, at)
        else:
            held.consumer, held.delivered_ms, held.count = consumer, at, held.count + 1

    def owner(self, entry_id: str) -> str | None:
        held = self.pel.get(entry_id)
        return None if held is None else held.consumer


@dataclass(slots=True)
class Stream:
    entries: dict[str, Fields] = field(default_factory=dict)
    groups: dict[str, Group] = field(default_factory=dict)
    last: tuple[int, int] = (0, 0)
    added: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, fields: Fields) -> str:
        ms = now_ms()
        self.last = (ms, 0) if ms > self.last[0] else (self.last[0], self.last[1] + 1)
        entry_id = f"{self.last[0]}-{self.last[1]}"
        self.entries[entry_id] = fields
        self.added.set()
        return entry_id

    def ack(self, group: str, entry_id: str) -> None:
        found = self.groups.get(group)
        if found is not None:
            found.pel.pop(entry_id, None)

    def ack_delete(self, group: str, entry_id: str) -> None:
        self.ack(group, entry_id)
        self.entries.pop(entry_id, None)


class State:
    """Every record of one MemoryBus, by the key the Redis bus would use for it."""

    def __init__(self) -> None:
        self.streams: dict[str, Stream] = {}
        self.hashes: dict[str, dict[str, str]] = {}
        self.delayed: dict[str, dict[bytes, int]] = {}
        # A fair tier's queue: a heap of (virtual finish time, member); and its clock ('@')
        # and keys' last finish times ('k:<key>'), as the Redis bus's fair keys hold them.
        self.fair: dict[str, list[tuple[float, bytes]]] = {}
        self.fair_clock: dict[str, dict[str, float]] = {}
        # A capped fair tier's entries moved in per key, that may hold a slot; and the
        # tasks whose turn came while their key was at its cap, per key in order.
        self.fair_running: dict[str, dict[str, list[str]]] = {}
        self.fair_held: dict[str, dict[str, deque[bytes]]] = {}
        self.strings: dict[str, str] = {}
        self._expires: dict[str, float] = {}

    def stream(self, name: str) -> Stream:
        found = self.streams.get(name)
        if found is None:
            found = self.streams[name] = Stream()
        return found

    def group(self, name: str, group: str) -> Group | None:
        found = self.streams.get(name)
        return None if found is None else found.groups.get(group)

    def hash(self, key: str) -> dict[str, str] | None:
        self._expire(key)
        return self.hashes.get(key)

    def hash_for_write(self, key: str) -> dict[str, str]:
        found = self.hash(key)
        if found is None:
            found = self.hashes[key] = {}
        return found

    def string(self, key: str) -> str | None:
        self._expire(key)
        return self.strings.get(key)

    def expire(self, key: str, ttl_s: float) -> None:
        self._expires[key] = time.monotonic() + ttl_s

    def expire_if_there(self, key: str, ttl_s: float) -> None:
        """EXPIRE as Redis does it: a key that does not exist is left alone."""
        if self.hash(key) is not None or self.string(key) is not None:
            self.expire(key, ttl_s)

    def persist(self, key: str) -> None:
        self._expires.pop(key, None)

    def _expire(self, key: str) -> None:
        due = self._expires.get(key)
        if due is not None and due <= time.monotonic():
            del self._expires[key]
            self.hashes.pop(key, None)
            self.strings.pop(key, None)
