"""MemoryBus: the MessageBus in one process, with the Redis bus's delivery semantics.

Each method does what the Redis bus's command or script does, step for step (the Lua
scripts under ``redis_streams/lua`` are the reference), so what a caller observes (owner-
checked commits, reclaims, delivery counts, retries, dead letters, cancel, idempotent
enqueue) is the same. Every method finishes its changes before its first await: atomic on
the event loop, as a script is on the server."""

from __future__ import annotations

import asyncio
import heapq
from collections import deque
from collections.abc import Callable, Sequence
from typing import NamedTuple

import orjson

from deepagents.contract.events import AuditEvent
from deepagents.errors import GroupVanished, NotReplicated
from deepagents.transport.base import (
    Admitted,
    BeginItem,
    Begun,
    Claimed,
    CommitItem,
    DeadLetter,
    Enqueue,
    Fairness,
    Held,
    Moved,
    Promoted,
    RawEntry,
    ReclaimCursor,
    Reschedule,
    StepRecord,
    StreamRef,
    StreamStats,
    now_ms,
)
from deepagents.transport.entries import entry_fields, task_id_of
from deepagents.transport.fair_polling import read_while_busy
from deepagents.transport.keys import ShardKeys
from deepagents.transport.memory.children import CHILD_WAIT_FIELDS, MemoryChildren
from deepagents.transport.memory.data import Fields, Group, State, Stream, parse_id
from deepagents.transport.memory.replies import MemoryReplies, MemoryReplyListener
from deepagents.transport.memory.waiting import WAIT_FIELDS, MemoryWaiting, drop_wait
from deepagents.transport.outbox import encode_events
from deepagents.transport.states import TERMINAL, Cancelled, Enqueued, Outcome, Replayed, TaskState

_b = str.encode
_CANCELLABLE = frozenset(
    {TaskState.QUEUED, TaskState.SCHEDULED, TaskState.RETRYING, TaskState.WAITING}
)
_CANCELLABLE_RUNNING = _CANCELLABLE | {TaskState.RUNNING}
# A task's first start and its earlier deliveries' spend: a replay starts it afresh.
_FIRST_RUN = ("first_ms", "spent_tokens", "spent_cost")


class MemoryBus(MemoryWaiting, MemoryChildren):
    """Everything lives in ``state``; hand the same state to a ``MemoryTaskStore`` to read
    the task records the bus writes."""

    def __init__(
        self,
        state: State | None = None,
        *,
        result_ttl_s: int = 86_400,
        replicas: int = 0,
        replica_wait_ms: int = 1_000,
    ) -> None:
        self.state = state or State()
        self.result_ttl_s = result_ttl_s
        # One process has no replicas to confirm anything: a bus built to wait for some
        # refuses every enqueue, as a Redis without replicas does.
        self.replicas = replicas
        self.replica_wait_ms = replica_wait_ms
        self.replies = MemoryReplies()

    async def aclose(self) -> None:
        return None

    async def check_server(self) -> str:
        return "memory"  # nothing is ever evicted

    async def ping_ms(self, limit_s: float = 2.0) -> float | None:
        return 0.0

    def reply_listener(self, channel: str, deliver: Callable[[bytes], None]) -> MemoryReplyListener:
        return MemoryReplyListener(self.replies, channel, deliver)

    def _group(self, stream: StreamRef, group: str) -> tuple[Stream, Group]:
        found = self.state.streams.get(stream.name)
        held = None if found is None else found.groups.get(group)
        if found is None or held is None:
            raise GroupVanished(f"{stream.name}: consumer group {group} is gone (NOGROUP)")
        return found, held

    async def ensure_group(self, stream: StreamRef, group: str) -> None:
        self.state.stream(stream.name).groups.setdefault(group, Group())

    # enqueue ------------------------------------------------------------------------------

    async def enqueue(
        self,
        stream: StreamRef,
        task_id: str,
        task_json: bytes,
        *,
        reply: str,
        max_backlog: int,
        events: Sequence[AuditEvent] = (),
    ) -> Admitted:
        (result,) = await self.enqueue_many(
            [Enqueue(stream, task_id, task_json, reply, events)], max_backlog=max_backlog
        )
        return result

    async def enqueue_many(
        self,
        items: Sequence[Enqueue],
        *,
        max_backlog: int | Sequence[int],
        locations: Sequence[tuple[str, str]] = (),
        location_ttl_s: int = 0,
        due_ms: Sequence[int] = (),
        fair: Sequence[Fairness | None] = (),
    ) -> list[Admitted]:
        limits = [max_backlog] * len(items) if isinstance(max_backlog, int) else max_backlog
        dues = due_ms or [0] * len(items)
        shares = fair or [None] * len(items)
        out = [
            self._enqueue(item, limit, due, share)
            for item, limit, due, share in zip(items, limits, dues, shares, strict=True)
        ]
        # As on one Redis: a task's location record is written with its entry, if enqueued.
        for (status, _), (key, value) in zip(out, locations or [("", "")] * len(out), strict=True):
            if status == Enqueued.OK and key:
                self.state.strings[key] = value
                self.state.expire(key, location_ttl_s)
        if self.replicas:
            written = [
                i.task_id
                for i, (status, _) in zip(items, out, strict=True)
                if status == Enqueued.OK
            ]
            raise NotReplicated(
                written, confirmed=0, replicas=self.replicas, wait_ms=self.replica_wait_ms
            )
        return out

    def _enqueue(
        self, item: Enqueue, limit: int, due: int = 0, share: Fairness | None = None
    ) -> Admitted:
        stream, task_json, reply = item.stream, item.task_json, item.reply
        key = stream.keys.task(item.task_id)
        existing = self.state.hash(key)
        if existing is not None:
            return Admitted(Enqueued.EXISTS, existing.get("entry", ""))
        target = self.state.stream(stream.name)
        queue = self.state.fair.get(stream.keys.fair(stream.tier), [])
        waiting = len(queue) + self._held_count(stream) if share else 0
        if len(target.entries) + waiting >= limit:
            return Admitted(Enqueued.OVERLOADED, "")
        at = str(now_ms())
        if due:  # as the enqueue script: the member a retry's reschedule writes, attempt 1
            self._schedule(stream, key, task_json, reply, at, due)
            self._outbox(stream.keys, item.events)
            return Admitted(Enqueued.OK, "")
        if share is not None and (queue or _unread(target) or self._at_cap(stream, share)):
            self._hold_fair(stream, task_json, reply, at, share)
            self.state.hashes[key] = {
                "state": TaskState.QUEUED,
                "entry": "",
                "tier": stream.tier,
                "reply": reply,
                "enq_ms": at,
                "deliveries": "0",
            }
            self._outbox(stream.keys, item.events)
            return Admitted(Enqueued.OK, "")
        entry_id = target.add(entry_fields(task_json, 1, at, reply))
        if share is not None and share.cap:
            self._running(stream).setdefault(share.key, []).append(entry_id)
        self.state.hashes[key] = {
            "state": TaskState.QUEUED,
            "entry": entry_id,
            "tier": stream.tier,
            "reply": reply,
            "enq_ms": at,
            "deliveries": "0",
        }
        self._outbox(stream.keys, item.events)
        return Admitted(Enqueued.OK, entry_id)

    def _hold_fair(
        self, stream: StreamRef, task_json: bytes, reply: str, at: str, share: Fairness
    ) -> None:
        """Into the stream's fair queue at its virtual finish time (the enqueue script)."""
        clock = self.state.fair_clock.setdefault(stream.keys.fair_clock(stream.tier), {})
        field = f"k:{share.key}"
        tag = max(clock.get("@", 0.0), clock.get(field, 0.0)) + 1 / share.weight
        clock[field] = tag
        member = orjson.dumps(
            {"task": task_json.decode(), "reply": reply, "enq": at, "key": share.key}
        )
        heapq.heappush(self.state.fair.setdefault(stream.keys.fair(stream.tier), []), (tag, member))

    def _release_fair(self, stream: StreamRef, count: int) -> None:
        """The release script: the fair queue's first ``count`` into the stream; first the
        tasks held for a slot while the tier had a per-key cap, if any."""
        target = self.state.stream(stream.name)
        held = self._held(stream)
        for key in sorted(held, key=lambda k: f"{len(k.encode())}:{k}".encode()):
            tasks = held[key]
            while tasks and count:
                m = orjson.loads(tasks.popleft())
                target.add(entry_fields(m["task"].encode(), 1, m["enq"], m["reply"]))
                count -= 1
            if not tasks:
                del held[key]
        queue = self.state.fair.get(stream.keys.fair(stream.tier))
        if not queue or not count:
            return
        clock = self.state.fair_clock.setdefault(stream.keys.fair_clock(stream.tier), {})
        for _ in range(min(count, len(queue))):
            tag, member = heapq.heappop(queue)
            m = orjson.loads(member)
            target.add(entry_fields(m["task"].encode(), 1, m["enq"], m["reply"]))
            field = f"k:{m['key']}"
            if clock.get(field, tag) <= tag:
                clock.pop(field, None)
            clock["@"] = tag

    def _running(self, stream: StreamRef) -> dict[str, list[str]]:
        return self.state.fair_running.setdefault(stream.keys.fair_running(stream.tier), {})

    def _held(self, stream: StreamRef) -> dict[str, deque[bytes]]:
        return self.state.fair_held.setdefault(stream.keys.fair_held(stream.tier), {})

    def _held_count(self, stream: StreamRef) -> int:
        return sum(len(q) for q in self._held(stream).values())

    def _at_cap(self, stream: StreamRef, share: Fairness) -> bool:
        """The enqueue script's check: the key's listed entries number its cap."""
        return bool(share.cap) and len(self._running(stream).get(share.key, ())) >= share.cap

    def _release_capped(self, stream: StreamRef, group: str, count: int, cap: int) -> bool:
        """``release_capped.lua``: held keys below their cap first, then the fair queue in
        turn, a key at its cap passing its turn to the held set. Answers busy."""
        queue = self.state.fair.setdefault(stream.keys.fair(stream.tier), [])
        clock = self.state.fair_clock.setdefault(stream.keys.fair_clock(stream.tier), {})
        held = self._held(stream)
        target = self.state.stream(stream.name)
        slots = _Slots(self._running(stream), target.groups.get(group), cap)

        def move(key: str, member: bytes) -> None:
            m = orjson.loads(member)
            slots.add(key, target.add(entry_fields(m["task"].encode(), 1, m["enq"], m["reply"])))

        budget = count
        # The script's lexical order of '<#key>:<key>'.
        for key in sorted(held, key=lambda k: f"{len(k.encode())}:{k}".encode()):
            tasks = held[key]
            for _ in range(min(slots.free(key), budget, len(tasks))):
                move(key, tasks.popleft())
                budget -= 1
            if not tasks:
                del held[key]
        pops = 0
        while budget and queue and pops < 4:
            pops += 1
            for _ in range(min(budget, len(queue))):
                tag, member = heapq.heappop(queue)
                key = orjson.loads(member)["key"]
                if slots.free(key) > 0:
                    move(key, member)
                    budget -= 1
                else:
                    held.setdefault(key, deque()).append(member)
                field = f"k:{key}"
                if clock.get(field, tag) <= tag:
                    clock.pop(field, None)
                clock["@"] = tag
        waiting = bool(queue) or bool(held)
        return slots.settle(check_all=not waiting) or waiting

    def _schedule(
        self, stream: StreamRef, key: str, task_json: bytes, reply: str, at: str, due: int
    ) -> None:
        member = orjson.dumps(
            {"task": task_json.decode(), "attempt": 1, "tier": stream.tier, "reply": reply}
        )
        self.state.delayed.setdefault(stream.keys.delayed, {})[member] = due
        self.state.hashes[key] = {
            "state": TaskState.SCHEDULED,
            "entry": "",
            "tier": stream.tier,
            "reply": reply,
            "enq_ms": at,
            "due_ms": str(due),
            "deliveries": "0",
        }

    async def set_many(self, pairs: Sequence[tuple[str, str]], ttl_s: int, *, what: str) -> int:
        if not pairs:
            return 0
        for key, value in pairs:
            self.state.strings[key] = value
            self.state.expire(key, ttl_s)
        return 0

    def _outbox(self, keys: ShardKeys, events: Sequence[AuditEvent]) -> None:
        if events:
            self.state.stream(keys.outbox).add({b"events": encode_events(events)})

    # reading ------------------------------------------------------------------------------

    async def read(
        self, stream: StreamRef, group: str, consumer: str, count: int, block_ms: int | None
    ) -> list[RawEntry]:
        found, held = self._group(stream, group)
        entries = self._read_new(found, held, consumer, count)
        if entries or block_ms is None:
            return entries
        found.added.clear()
        try:
            async with asyncio.timeout(block_ms / 1000 if block_ms else None):
                await found.added.wait()
        except TimeoutError:
            return []
        return self._read_new(*self._group(stream, group), consumer, count)

    async def read_fair(
        self,
        stream: StreamRef,
        group: str,
        consumer: str,
        count: int,
        block_ms: int | None,
        *,
        cap: int = 0,
    ) -> list[RawEntry]:
        async def release() -> tuple[list[RawEntry], bool]:
            found, held = self._group(stream, group)
            busy = False
            if cap:
                busy = self._release_capped(stream, group, count, cap)
            else:
                self._release_fair(stream, count)
            return self._read_new(found, held, consumer, count), busy

        async def read(wait: int | None) -> list[RawEntry]:
            return await self.read(stream, group, consumer, count, wait)

        return await read_while_busy(release, read, block_ms)

    def _read_new(self, found: Stream, held: Group, consumer: str, count: int) -> list[RawEntry]:
        at = now_ms()
        if consumer in held.seen_ms:  # a read that finds nothing makes no new consumer
            held.seen_ms[consumer] = at
        out: list[RawEntry] = []
        for entry_id, fields in found.entries.items():
            if len(out) == count:
                break
            if parse_id(entry_id) > held.last:
                held.last = parse_id(entry_id)
                held.deliver(entry_id, consumer, at)
                out.append(RawEntry(entry_id, fields))
        return out

    async def read_own_pending(
        self, stream: StreamRef, group: str, consumer: str, count: int, after: str
    ) -> list[RawEntry]:
        found, held = self._group(stream, group)
        at, start = now_ms(), parse_id(after)
        mine = [i for i, p in held.pel.items() if p.consumer == consumer and parse_id(i) > start]
        for entry_id in mine[:count]:
            held.deliver(entry_id, consumer, at)
        return [RawEntry(i, found.entries.get(i)) for i in mine[:count]]

    async def claim_stale(
        self,
        stream: StreamRef,
        group: str,
        consumer: str,
        min_idle_ms: int,
        count: int,
        cursor: ReclaimCursor,
    ) -> Claimed:
        found, held = self._group(stream, group)
        at, start = now_ms(), parse_id(cursor.position)
        entries: list[RawEntry] = []
        deleted: list[str] = []
        ids = [i for i in held.pel if parse_id(i) >= start]
        for n, entry_id in enumerate(ids):
            if len(entries) + len(deleted) == count:
                return Claimed(entries, deleted, ReclaimCursor(ids[n]))
            if at - held.pel[entry_id].delivered_ms < min_idle_ms:
                continue
            fields = found.entries.get(entry_id)
            if fields is None:  # its body is gone: out of the PEL, reported (as 7.x does)
                del held.pel[entry_id]
                deleted.append(entry_id)
                continue
            held.deliver(entry_id, consumer, at)
            entries.append(RawEntry(entry_id, fields))
        return Claimed(entries, deleted, ReclaimCursor())

    # the protocol's steps -----------------------------------------------------------------

    async def begin(
        self,
        stream: StreamRef,
        group: str,
        consumer: str,
        items: Sequence[BeginItem],
        *,
        fresh: bool = False,
    ) -> list[Begun]:
        found, held = self._group(stream, group)
        at, out, events = str(now_ms()), [], []
        for item in items:
            owner = held.owner(item.entry_id)
            if not fresh and owner != consumer:
                out.append(Begun(Outcome.GONE if owner is None else Outcome.LOST, 0))
                continue
            task = self.state.hash_for_write(stream.keys.task(item.task_id))
            if task.get("state") == TaskState.DONE:
                found.ack_delete(group, item.entry_id)
                out.append(Begun(Outcome.DUP, 0))
                continue
            n = _int(task.get("deliveries")) + 1
            task.update(
                state=TaskState.RUNNING,
                owner=consumer,
                entry=item.entry_id,
                attempt=str(item.attempt),
                started_ms=at,
                deliveries=str(n),
            )
            if item.started is not None:  # the count the begin script appends
                started = item.started
                events.append(started._replace(fields={**started.fields, "deliveries": n}))
            first = task.get("first_ms")
            if first is None:
                task["first_ms"] = at
                out.append(Begun(Outcome.OK, n, task.get("stepped") == "1"))
                continue
            out.append(
                Begun(
                    Outcome.OK,
                    n,
                    task.get("stepped") == "1",
                    first_ms=_int(first),
                    spent_tokens=_int(task.get("spent_tokens")),
                    spent_cost_usd=float(task.get("spent_cost", "0")),
                )
            )
        self._outbox(stream.keys, events)
        return out

    async def commit(
        self, stream: StreamRef, group: str, consumer: str, items: Sequence[CommitItem]
    ) -> list[Outcome]:
        (statuses,) = await self.commit_streams(group, consumer, [(stream, items)])
        return statuses

    async def commit_streams(
        self, group: str, consumer: str, batches: Sequence[tuple[StreamRef, Sequence[CommitItem]]]
    ) -> list[list[Outcome]]:
        at = str(now_ms())
        return [self._commit(stream, group, consumer, at, items) for stream, items in batches]

    def _commit(
        self, stream: StreamRef, group: str, consumer: str, at: str, items: Sequence[CommitItem]
    ) -> list[Outcome]:
        found, held = self._group(stream, group)
        out: list[Outcome] = []
        events: list[AuditEvent] = []
        for item in items:
            key = stream.keys.task(item.task_id)
            task = self.state.hash(key) or {}
            owner = held.owner(item.entry_id)
            if owner is None:  # ours already landed (a repeat after a lost reply), or lost
                ours = (task.get("owner"), task.get("entry")) == (consumer, item.entry_id)
                landed = task.get("state") == TaskState.DONE and ours
                out.append(Outcome.OK if landed else Outcome.LOST)
                continue
            if owner != consumer:
                out.append(Outcome.LOST)
                continue
            found.ack_delete(group, item.entry_id)
            if task.get("state") == TaskState.DONE:
                out.append(Outcome.DUP)
                continue
            result = item.result_json.decode()
            self.state.hash_for_write(key).update(
                state=TaskState.DONE, result=result, owner=consumer, finished_ms=at
            )
            self.state.expire(key, self.result_ttl_s)
            self.state.expire_if_there(stream.keys.steps(item.task_id), self.result_ttl_s)
            events += item.events
            self.replies.publish(item.reply, item.result_json)
            out.append(Outcome.OK)
        self._outbox(stream.keys, events)
        return out

    async def reschedule(
        self, stream: StreamRef, group: str, consumer: str, item: Reschedule
    ) -> Outcome:
        found, held = self._group(stream, group)
        if held.owner(item.entry_id) != consumer:
            return Outcome.LOST
        key = stream.keys.task(item.task_id)
        found.ack_delete(group, item.entry_id)
        if (self.state.hash(key) or {}).get("state") == TaskState.DONE:
            return Outcome.DUP
        member = {
            "tier": item.tier,
            "task": item.task_json.decode(),
            "attempt": item.attempt,
            "reply": item.reply,
            "entry": item.entry_id,
        }
        self.state.delayed.setdefault(stream.keys.delayed, {})[orjson.dumps(member)] = item.due_ms
        task = self.state.hash_for_write(key)
        task.update(state=TaskState.RETRYING, due_ms=str(item.due_ms))
        if not item.counted and _int(task.get("deliveries")) > 0:
            task["deliveries"] = str(_int(task["deliveries"]) - 1)
        if item.spent_tokens > 0:
            task["spent_tokens"] = str(_int(task.get("spent_tokens")) + item.spent_tokens)
        if item.spent_cost_usd > 0:
            spent = float(task.get("spent_cost", "0")) + item.spent_cost_usd
            task["spent_cost"] = repr(spent)
        self._outbox(stream.keys, item.events)
        return Outcome.OK

    async def dead_letter(
        self, stream: StreamRef, group: str, consumer: str, item: DeadLetter
    ) -> Outcome:
        found, held = self._group(stream, group)
        if item.check_owner and held.owner(item.entry_id) != consumer:
            return Outcome.LOST
        key = stream.keys.task(item.task_id or "-")
        task = self.state.hash(key)
        result = item.result_json if item.task_id else b""
        events = item.events
        if result and item.salvaged and (task or {}).get("entry") != item.entry_id:
            result, events = b"", item.unbound_events
        at = str(now_ms())
        deliveries = (task or {}).get("deliveries", "0") if result else "0"
        record: Fields = {
            b"source": _b(stream.name),
            b"entry": _b(item.entry_id),
            b"reason": _b(item.reason),
            b"error": _b(item.error),
            b"dead_ms": _b(at),
            b"deliveries": _b(deliveries),
        }
        for name, value in (found.entries.get(item.entry_id) or {}).items():
            record[b"orig_" + name] = value
        self.state.stream(stream.keys.dlq).add(record)
        if result:
            self.state.hash_for_write(key).update(
                state=TaskState.DEAD, result=result.decode(), finished_ms=at
            )
            self.state.expire(key, self.result_ttl_s)
            self.state.expire_if_there(stream.keys.steps(item.task_id or "-"), self.result_ttl_s)
            self.replies.publish(item.reply, result)
        found.ack_delete(group, item.entry_id)
        self._outbox(stream.keys, events)
        return Outcome.OK

    async def touch(
        self, stream: StreamRef, group: str, consumer: str, entry_ids: Sequence[str]
    ) -> list[str]:
        return self._reset_idle(stream, group, consumer, entry_ids, 0)

    def _reset_idle(
        self, stream: StreamRef, group: str, consumer: str, entry_ids: Sequence[str], idle: int
    ) -> list[str]:
        _, held = self._group(stream, group)
        lost = []
        for entry_id in entry_ids:
            pending = held.pel.get(entry_id)
            if pending is None or pending.consumer != consumer:
                lost.append(entry_id)
            else:
                pending.delivered_ms = now_ms() - idle
        return lost

    async def deliveries(self, stream: StreamRef, task_ids: Sequence[str]) -> list[int]:
        return [
            _int((self.state.hash(stream.keys.task(t)) or {}).get("deliveries")) for t in task_ids
        ]

    async def cancelled(self, stream: StreamRef, task_ids: Sequence[str]) -> list[str]:
        return [
            t for t in task_ids if (self.state.hash(stream.keys.task(t)) or {}).get("cancelled")
        ]

    async def hand_back(
        self,
        stream: StreamRef,
        group: str,
        consumer: str,
        items: Sequence[Held],
        idle_ms: int,
    ) -> list[str]:
        lost = self._reset_idle(stream, group, consumer, [i.entry_id for i in items], idle_ms)
        for item in items:
            task = self.state.hash(stream.keys.task(item.task_id))
            if item.entry_id in lost or task is None:
                continue
            n = _int(task.get("deliveries"))
            ours = (task.get("state"), task.get("owner"), task.get("entry"))
            if ours == (TaskState.RUNNING, consumer, item.entry_id) and n > 0:
                task["deliveries"] = str(n - 1)  # not counted: it never ran to an end here
        return lost

    async def prune_consumers(
        self, stream: StreamRef, group: str, consumer: str, min_idle_ms: int
    ) -> list[str]:
        _, held = self._group(stream, group)
        busy = {p.consumer for p in held.pel.values()}
        at = now_ms()
        removed = [
            name
            for name, seen in held.seen_ms.items()
            if name != consumer and name not in busy and at - seen >= min_idle_ms
        ]
        for name in removed:
            del held.seen_ms[name]
        return removed

    async def expose(self, stream: StreamRef, group: str, dead: str, idle_ms: int) -> int:
        found, held = self._group(stream, group)
        at, n = now_ms(), 0
        for entry_id, pending in held.pel.items():
            if pending.consumer == dead and entry_id in found.entries:
                pending.delivered_ms = min(pending.delivered_ms, at - idle_ms)
                n += 1
        return n

    # delayed and dead letters -------------------------------------------------------------

    async def promote_due(
        self, keys: ShardKeys, tiers: Sequence[str], limit: int = 500
    ) -> Promoted:
        members = self.state.delayed.get(keys.delayed, {})
        at = now_ms()
        due = sorted((score, m) for m, score in members.items() if score <= at)[:limit]
        moved = dead = 0
        waits, damaged = [], []
        for _, member in due:
            if member.startswith(b"w:"):  # left in the set: ``wake`` takes it out
                waits.append(member[2:].decode())
                continue
            del members[member]
            parsed, error = _delayed_member(member)
            if parsed is None:
                self.state.stream(keys.dlq).add(
                    {
                        b"source": _b(keys.delayed),
                        b"reason": b"decode_error",
                        b"error": _b(error),
                        b"dead_ms": _b(str(at)),
                        b"deliveries": b"0",
                        b"orig_member": member,
                    }
                )
                dead += 1
                salvaged = _salvage(member)
                if salvaged is not None:
                    damaged.append((salvaged, error))
                continue
            tier = parsed.tier if parsed.tier in tiers else tiers[-1]
            fields = entry_fields(_b(parsed.task), parsed.attempt, at, parsed.reply)
            self.state.stream(keys.stream(tier)).add(fields)
            moved += 1
        return Promoted(moved, dead, tuple(waits), tuple(damaged))

    async def end_damaged(
        self, keys: ShardKeys, task_id: str, result_json: bytes, events: Sequence[AuditEvent]
    ) -> Cancelled | TaskState:
        key = keys.task(task_id)
        task = self.state.hash(key)
        if task is None or "state" not in task:
            return Cancelled.MISSING
        state = TaskState(task["state"])
        if state not in (TaskState.RETRYING, TaskState.SCHEDULED):
            return state
        task.update(state=TaskState.DEAD, result=result_json.decode(), finished_ms=str(now_ms()))
        self.state.expire(key, self.result_ttl_s)
        self.state.expire_if_there(keys.steps(task_id), self.result_ttl_s)
        self._outbox(keys, events)
        self.replies.publish(task.get("reply", ""), result_json)
        return Cancelled.OK

    async def replay(
        self, keys: ShardKeys, dlq_entry: str, tier: str, task_id: str, task_json: bytes, reply: str
    ) -> tuple[Replayed, str]:
        dlq = self.state.stream(keys.dlq)
        if dlq_entry not in dlq.entries:
            return Replayed.MISSING, ""
        at = str(now_ms())
        entry_id = self.state.stream(keys.stream(tier)).add(entry_fields(task_json, 1, at, reply))
        key = keys.task(task_id)
        task = self.state.hash_for_write(key)
        for name in ("result", "owner", "finished_ms", "due_ms", *_FIRST_RUN):
            task.pop(name, None)
        task.update(state=TaskState.QUEUED, entry=entry_id, enq_ms=at, deliveries="0")
        self.state.persist(key)
        self.state.persist(keys.steps(task_id))
        del dlq.entries[dlq_entry]
        return Replayed.OK, entry_id

    async def cancel(
        self,
        keys: ShardKeys,
        task_id: str,
        result_json: bytes,
        events: Sequence[AuditEvent],
        *,
        running: bool = False,
        notify: str = "",
    ) -> Cancelled | TaskState:
        key = keys.task(task_id)
        task = self.state.hash(key)
        if task is None or "state" not in task:
            return Cancelled.MISSING
        state = TaskState(task["state"])
        if state not in (_CANCELLABLE_RUNNING if running else _CANCELLABLE):
            return state
        if state == TaskState.WAITING:
            drop_wait(self.state, keys, task_id)
            for name in (*WAIT_FIELDS, *CHILD_WAIT_FIELDS):
                task.pop(name, None)
        task.update(
            state=TaskState.DONE,
            result=result_json.decode(),
            finished_ms=str(now_ms()),
            cancelled="1",
        )
        self.state.expire(key, self.result_ttl_s)
        self.state.expire_if_there(keys.steps(task_id), self.result_ttl_s)
        self._outbox(keys, events)
        self.replies.publish(task.get("reply", ""), result_json)
        if state == TaskState.RUNNING and notify:
            self.replies.publish(notify, task_id.encode())
        return Cancelled.OK

    async def record_steps(
        self, group: str, consumer: str, items: Sequence[tuple[StreamRef, StepRecord]]
    ) -> list[Outcome]:
        return [self._record_steps(stream, group, consumer, item) for stream, item in items]

    def _record_steps(
        self, stream: StreamRef, group: str, consumer: str, item: StepRecord
    ) -> Outcome:
        held = self.state.group(stream.name, group)
        if held is None or held.owner(item.entry_id) != consumer:
            return Outcome.LOST
        task = self.state.hash(stream.keys.task(item.task_id)) or {}
        if task.get("state") in TERMINAL:
            return Outcome.DUP
        if item.fields:
            record = self.state.hash_for_write(stream.keys.steps(item.task_id))
            record.update((name, value.decode()) for name, value in item.fields)
            self.state.hash_for_write(stream.keys.task(item.task_id))["stepped"] = "1"
        self._outbox(stream.keys, item.events)
        return Outcome.OK

    async def load_steps(self, keys: ShardKeys, task_id: str) -> dict[str, bytes]:
        found = self.state.hash(keys.steps(task_id)) or {}
        return {name: _b(value) for name, value in found.items()}

    # views --------------------------------------------------------------------------------

    async def move_unstarted(
        self, source: StreamRef, target: StreamRef, group: str, *, limit: int = 500
    ) -> Moved:
        """As ``move.lua``: entries after the group's last-delivered id (all of them when
        there is no group yet) and every delayed member, each moved once."""
        found = self.state.streams.get(source.name)
        moved = 0
        if found is not None:
            held = found.groups.get(group)
            last = held.last if held is not None else (0, 0)
            unstarted = [i for i in found.entries if held is None or parse_id(i) > last]
            for entry_id in unstarted:
                fields = found.entries.pop(entry_id)
                new = self.state.stream(target.name).add(fields)
                task = self.state.hash(source.keys.task(task_id_of(fields)))
                if task is not None and task.get("entry") == entry_id:
                    task["entry"] = new
                moved += 1
        members = self.state.delayed.pop(source.keys.delayed, {})
        if members:
            self.state.delayed.setdefault(target.keys.delayed, {}).update(members)
        return Moved(moved, len(members))

    async def stream_stats(self, stream: StreamRef, group: str) -> StreamStats:
        stats = StreamStats(stream=stream.name)
        stats.fair = len(self.state.fair.get(stream.keys.fair(stream.tier), ()))
        stats.fair += self._held_count(stream)
        found = self.state.streams.get(stream.name)
        held = None if found is None else found.groups.get(group)
        if found is None:
            return stats
        stats.length = len(found.entries)
        if held is None:  # no worker ever read it: every entry is unread (see the Redis bus)
            stats.lag = stats.length
            return stats
        stats.pending = len(held.pel)
        stats.consumers = len(held.seen_ms.keys() | {p.consumer for p in held.pel.values()})
        if held.pel:
            stats.oldest_pending_ms = now_ms() - next(iter(held.pel.values())).delivered_ms
        stats.lag = sum(1 for i in found.entries if parse_id(i) > held.last)
        return stats

    async def shard_backlog(self, keys: ShardKeys) -> tuple[int, int]:
        dlq = self.state.streams.get(keys.dlq)
        delayed = len(self.state.delayed.get(keys.delayed, {}))
        waits = len(self.state.delayed.get(keys.waiting, {}))  # their waits are not retries
        return len(dlq.entries) if dlq else 0, max(0, delayed - waits)

    async def oldest_idle_ms(
        self, streams: Sequence[tuple[str, str]], scan: int
    ) -> list[int | None]:
        at, out = now_ms(), []
        for name, group in streams:
            held = self.state.group(name, group)
            pending = list(held.pel.values())[:scan] if held else []
            out.append(max(at - p.delivered_ms for p in pending) if pending else None)
        return out

    async def outbox_lengths(self, shards: Sequence[ShardKeys]) -> list[int]:
        return [len(self.state.stream(keys.outbox).entries) for keys in shards]


def _int(raw: str | None) -> int:
    return int(raw) if raw and raw.isdigit() else 0


class _Member(NamedTuple):
    tier: str
    task: str
    attempt: int
    reply: str


def _salvage(member: bytes) -> str | None:
    """The task id of a member that failed the check, if its task is still readable."""
    try:
        parsed = orjson.loads(member)
        task = orjson.loads(parsed["task"]) if isinstance(parsed, dict) else None
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    task_id = task.get("task_id") if isinstance(task, dict) else None
    return task_id if isinstance(task_id, str) else None


def _delayed_member(member: bytes) -> tuple[_Member | None, str]:
    """A delayed set's member, checked as the promote script checks it."""
    try:
        parsed = orjson.loads(member)
    except orjson.JSONDecodeError as exc:
        return None, f"not JSON: {exc}"
    if not isinstance(parsed, dict):
        return None, "not a JSON object"
    if not isinstance(parsed.get("task"), str):
        return None, "no task string"
    attempt = parsed.get("attempt")
    if not isinstance(attempt, int | float) or attempt < 1 or attempt != int(attempt):
        return None, "attempt is not an integer >= 1"
    reply = parsed.get("reply")
    if reply is not None and not isinstance(reply, str):
        return None, "reply is not a string"
    return _Member(str(parsed.get("tier")), parsed["task"], int(attempt), reply or ""), ""


class _Slots:
    """A capped key's entries that may hold a slot (``release_capped.lua``'s running list):
    one holds it while pending in the group or unread; checked once per release, at the cap."""

    def __init__(self, running: dict[str, list[str]], group: Group | None, cap: int) -> None:
        self.running, self.group, self.cap = running, group, cap
        self.checked: set[str] = set()

    def check(self, key: str) -> None:
        if key in self.checked:
            return
        self.checked.add(key)
        found = self.group
        self.running[key] = [
            i
            for i in self.running.get(key, ())
            if found is not None and (i in found.pel or parse_id(i) > found.last)
        ]

    def free(self, key: str) -> int:
        if len(self.running.get(key, ())) >= self.cap:
            self.check(key)
        return self.cap - len(self.running.get(key, ()))

    def add(self, key: str, entry_id: str) -> None:
        self.running.setdefault(key, []).append(entry_id)

    def settle(self, *, check_all: bool) -> bool:
        """Every key checked when nothing waits; empty lists dropped. Answers whether an
        entry still holds a slot."""
        if check_all:
            for key in list(self.running):
                self.check(key)
        for key in [k for k, ids in self.running.items() if not ids]:
            del self.running[key]
        return bool(self.running)


def _unread(stream: Stream) -> bool:
    """Some group has not read the stream's last entry (the enqueue script's check)."""
    if not stream.entries:
        return False
    last = parse_id(next(reversed(stream.entries)))
    return not stream.groups or any(g.last < last for g in stream.groups.values())
