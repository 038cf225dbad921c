"""RedisStreamBus: the MessageBus on Redis Streams (6.2 through 7.x, Cluster-safe keys)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson
import redis.exceptions as rex
from redis.asyncio import Redis, RedisCluster

from deepagents.contract.codec import DamagedRecord
from deepagents.contract.events import AuditEvent
from deepagents.errors import NotReplicated
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
from deepagents.transport.entries import task_id_of
from deepagents.transport.fair_polling import read_while_busy
from deepagents.transport.keys import ShardKeys
from deepagents.transport.outbox import encode_events, open_started
from deepagents.transport.redis_streams.children import RedisChildren
from deepagents.transport.redis_streams.errors import redis_errors
from deepagents.transport.redis_streams.lanes import Lanes
from deepagents.transport.redis_streams.pool import check_server
from deepagents.transport.redis_streams.replies import ReplyChannel
from deepagents.transport.redis_streams.scripts import Scripts
from deepagents.transport.redis_streams.waiting import RedisWaiting
from deepagents.transport.states import (
    Cancelled,
    Enqueued,
    Outcome,
    Replayed,
    TaskState,
    decoder,
)

# Tasks per enqueue script call: a large submit_many holds the server for at most this many.
_ENQUEUE_CALL = 256


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


_OUTCOME = decoder(Outcome)
_UNSET = Admitted(Enqueued.OK, "")
_ENQUEUED = decoder(Enqueued)
_REPLAYED = decoder(Replayed)
_CANCELLED: dict[bytes | str, Cancelled | TaskState] = {**decoder(TaskState), **decoder(Cancelled)}


# A move stops after this many rounds even if entries keep arriving (an orchestrator
# still routing to the source); the controller sweeps again on its next tick.
_MOVE_ROUNDS = 1_000
# The most entries of one dead consumer one expose call makes claimable (a stream's share
# of one worker's in-flight tasks is far below; the next liveness check does the rest).
EXPOSE_MOST = 10_000


def _cancelled(raw: bytes) -> Cancelled | TaskState:
    """The cancel (or end_damaged) script's answer: ok, missing, or the task's state that
    prevented it; a state no script writes is a damaged task record."""
    try:
        return _CANCELLED[raw]
    except KeyError:
        raise DamagedRecord("task", f"the task's state {raw[:40]!r} is not one") from None


def _entries(raw: list[Any]) -> list[RawEntry]:
    """Stream entries as the server sends them: [id, flat fields], the fields nil for an
    entry whose body was deleted; a nil entry (Redis 6.2's XAUTOCLAIM for such a body) is
    skipped, the caller finds it another way."""
    out: list[RawEntry] = []
    for entry in raw:
        if entry is None or entry[0] is None:
            continue
        entry_id, flat = entry
        if flat:
            it = iter(flat)
            out.append(RawEntry(entry_id.decode(), dict(zip(it, it, strict=True))))
        else:
            out.append(RawEntry(entry_id.decode(), None))
    return out


def _read_entries(reply: dict[Any, Any] | list[Any] | None) -> list[RawEntry]:
    """The entries of a one-stream XREADGROUP reply: a map of stream to entries (RESP3) or
    a list of [stream, entries] (RESP2)."""
    if not reply:
        return []
    return _entries(next(iter(reply.values())) if isinstance(reply, dict) else reply[0][1])


class RedisStreamBus(RedisWaiting, RedisChildren):
    """Uses the client it is given and never closes it; the worker's stream commands (read,
    reclaim, begin, commit) go over connections of its own (``Lanes``), which ``aclose()``
    closes.

    ``replicas``: every enqueue round trip ends with ``WAIT`` for that many replicas, and
    fewer confirming within ``replica_wait_ms`` raises ``NotReplicated``. ``allow_evicting``:
    ``check_server`` accepts a server whose ``maxmemory-policy`` evicts keys."""

    def __init__(
        self,
        client: Redis,
        *,
        result_ttl_s: int = 86_400,
        replicas: int = 0,
        replica_wait_ms: int = 1_000,
        allow_evicting: bool = False,
    ) -> None:
        # redis-py types replies for str clients; ours speaks bytes (decode_responses=False).
        self.client: Any = client
        self.result_ttl_s = result_ttl_s
        self.replicas = replicas
        self.replica_wait_ms = replica_wait_ms
        self.allow_evicting = allow_evicting
        self.scripts = Scripts.register(client)
        self.lanes = Lanes(client)
        # Once: redis-py's client classes derive from a typing.Protocol, so an isinstance
        # check runs Python code (two per submit were 3% of its instructions, callgrind).
        self._cluster = isinstance(client, RedisCluster)

    async def aclose(self) -> None:
        await self.lanes.aclose()

    async def check_server(self) -> str:
        """Refuse a Redis this protocol cannot run on (too old, or evicting keys)."""
        return await check_server(self.client, allow_evicting=self.allow_evicting)

    async def ping_ms(self, limit_s: float = 2.0) -> float | None:
        """PING's round trip in ms; None when Redis does not answer within ``limit_s``."""
        started = time.perf_counter()
        try:
            async with asyncio.timeout(limit_s):
                await self.client.ping()
        except Exception:  # whatever the failure, the answer is "no answer"
            return None
        return round((time.perf_counter() - started) * 1000, 3)

    def reply_listener(self, channel: str, deliver: Callable[[bytes], None]) -> ReplyChannel:
        return ReplyChannel(self.client, channel, deliver)

    async def _evalsha(
        self, script: Any, calls: Sequence[tuple[list[Any], list[Any]]]
    ) -> list[Any]:
        """Run a script once per (keys, args) in one round trip. EVALSHA directly (a
        pipeline given Script objects asks SCRIPT EXISTS first, an extra round trip)."""
        commands = [("EVALSHA", script.sha, len(keys), *keys, *args) for keys, args in calls]
        return await self._evalsha_commands(script, commands)

    async def ensure_group(self, stream: StreamRef, group: str) -> None:
        """Create the group (and stream) at id 0, tolerating only BUSYGROUP."""
        try:
            await self.client.xgroup_create(stream.name, group, id="0", mkstream=True)
        except rex.ResponseError as exc:
            if not str(exc).startswith("BUSYGROUP"):
                with redis_errors(f"XGROUP CREATE {stream.name}"):
                    raise
        except rex.RedisError as exc:
            with redis_errors(f"XGROUP CREATE {stream.name}"):
                raise exc

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
        """Enqueue a batch in one round trip.
        ``max_backlog`` is one limit for all, or one per item (a batch may mix agent types).

        ``due_ms``: none, or one per item: 0 enqueues it now; a time (ms since the epoch)
        puts it in its shard's delayed set instead, state ``scheduled``, its entry id ''.

        ``fair``: none, or one per item: a ``Fairness`` for a task of a fair tier (it may
        wait in the stream's fair queue, entry id '', until ``read_fair`` moves it in).

        ``locations``: none, or one per item: its task's location record (key, value), kept
        for ``location_ttl_s``. On one server the enqueue script writes it with the entry, so
        an enqueued task always has it and a refused one never does. On a cluster the
        location keys sit in other slots: they are written first, in a round trip of their
        own, so a task acknowledged as enqueued is never missing its location.

        With ``replicas`` (the bus's), the round trip ends with ``WAIT`` (on a cluster, each
        node's part does), and fewer replicas confirming the batch within
        ``replica_wait_ms`` raises ``NotReplicated``."""
        if not items:
            return []
        replicas, replica_wait_ms = self.replicas, self.replica_wait_ms
        limits = [max_backlog] * len(items) if isinstance(max_backlog, int) else max_backlog
        inline = bool(locations) and not self.cluster
        if locations and not inline:
            await self._record_first(items, locations, location_ttl_s, replicas, replica_wait_ms)
        commands, order = self._enqueue_calls(
            items, limits, locations if inline else (), location_ttl_s, due_ms, fair
        )
        script = self.scripts.enqueue
        with redis_errors("enqueue and record task locations" if inline else "enqueue"):
            if replicas:
                replies, confirmed = await self._replicated(
                    script, commands, replicas, replica_wait_ms
                )
            elif self.cluster:  # the cluster client's pipeline follows MOVED and ASK itself
                replies, confirmed = await self._pipelined(script, commands), 0
            else:
                replies, confirmed = await self._evalsha_commands(script, commands), 0
        out = [_UNSET] * len(items)  # each one set below
        at = iter(order)
        for reply in replies:  # flat: status, entry id, status, entry id, ...
            pairs = iter(reply)
            for status, entry in zip(pairs, pairs, strict=True):
                out[next(at)] = Admitted(_ENQUEUED[status], entry.decode())
        if confirmed < replicas:
            written = [
                item.task_id
                for item, (status, _) in zip(items, out, strict=True)
                if status != Enqueued.OVERLOADED
            ]
            raise NotReplicated(
                written, confirmed=confirmed, replicas=replicas, wait_ms=replica_wait_ms
            )
        return out

    def _enqueue_calls(
        self,
        items: Sequence[Enqueue],
        limits: Sequence[int],
        locations: Sequence[tuple[str, str]],
        location_ttl_s: int,
        due_ms: Sequence[int] = (),
        fair: Sequence[Fairness | None] = (),
    ) -> tuple[list[tuple[Any, ...]], list[int]]:
        """One enqueue script call per shard (its keys share one slot), at most
        ``_ENQUEUE_CALL`` tasks each; and the items' positions in the calls' order."""
        by_shard: dict[str, list[int]] = {}
        for i, item in enumerate(items):
            by_shard.setdefault(item.stream.keys.outbox, []).append(i)
        at, ttl = now_ms(), location_ttl_s if locations else ""
        sha = self.scripts.enqueue.sha
        commands, order = [], []
        for outbox, positions in by_shard.items():
            for start in range(0, len(positions), _ENQUEUE_CALL):
                part = positions[start : start + _ENQUEUE_CALL]
                # The fair keys and arguments only in calls with a fair task: the others
                # send what they always did.
                fairs = [fair[i] for i in part] if fair else []
                has_fair = any(f is not None for f in fairs)
                keys: list[Any] = [outbox, items[part[0]].stream.keys.delayed]
                args: list[Any] = [at, ttl, "1" if has_fair else ""]
                for j, i in enumerate(part):
                    item = items[i]
                    stream = item.stream
                    keys += (stream.name, stream.keys.task(item.task_id))
                    due = due_ms[i] if due_ms else 0
                    args += (
                        item.task_json,
                        item.reply,
                        limits[i],
                        stream.tier,
                        encode_events(item.events),
                    )
                    args.append(due or "")
                    if has_fair:
                        share, sk, tier = fairs[j], stream.keys, stream.tier
                        keys += (sk.fair(tier), sk.fair_clock(tier))
                        keys += (sk.fair_running(tier), sk.fair_held(tier))
                        args += (
                            (share.key, repr(share.weight), share.cap or "")
                            if share
                            else ("", "", "")
                        )
                    if locations:
                        key, value = locations[i]
                        keys.append(key)
                        args.append(value)
                commands.append(("EVALSHA", sha, len(keys), *keys, *args))
                order += part
        return commands, order

    async def _record_first(
        self,
        items: Sequence[Enqueue],
        locations: Sequence[tuple[str, str]],
        ttl_s: int,
        replicas: int,
        replica_wait_ms: int,
    ) -> None:
        """A cluster's location records, before their tasks are enqueued. With ``replicas``,
        each node's part waits on its own (they may sit on other nodes than their tasks)."""
        confirmed = await self._set_many(
            locations, ttl_s, "record task locations", replicas, replica_wait_ms
        )
        if confirmed < replicas:
            raise NotReplicated(
                [item.task_id for item in items],
                confirmed=confirmed,
                replicas=replicas,
                wait_ms=replica_wait_ms,
                stage="locations",
            )

    async def _pipelined(self, script: Any, commands: list[tuple[Any, ...]]) -> list[Any]:
        """EVALSHA directly: a pipeline given Script objects asks SCRIPT EXISTS first on
        every execute, an extra round trip per submit. As a plain command: a cluster
        client's pipeline has no evalsha() but routes the command by its keys."""
        for attempt in range(2):
            pipe = self.client.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            try:
                return list(await pipe.execute())
            except rex.NoScriptError:
                if attempt:
                    raise
                # The server lost its scripts (restart, SCRIPT FLUSH). Running the batch
                # again is safe: the script adds nothing for a task that already exists.
                await self.client.script_load(script.script)
        raise AssertionError("unreachable")

    async def _evalsha_commands(self, script: Any, commands: list[tuple[Any, ...]]) -> list[Any]:
        """EVALSHA commands over the bus's own connections (``Lanes``); on NOSCRIPT (a
        restart, SCRIPT FLUSH) load the script and run them again, which every script here
        makes safe: a call that already landed changes nothing the second time."""
        try:
            return await self.lanes.pipeline(commands)
        except rex.NoScriptError:
            await self.lanes.load_script(script.script)
            return await self.lanes.pipeline(commands)

    async def _replicated(
        self, script: Any, commands: list[tuple[Any, ...]], replicas: int, wait_ms: int
    ) -> tuple[list[Any], int]:
        """The commands, each node's part followed by ``WAIT`` on its connection (``WAIT``
        counts the writes of its own connection, so not through the client's pool)."""
        try:
            return await self.lanes.pipeline_replicated(commands, replicas, wait_ms)
        except rex.NoScriptError:
            await self.lanes.load_script(script.script)  # as above: safe to run again
            return await self.lanes.pipeline_replicated(commands, replicas, wait_ms)

    @property
    def cluster(self) -> bool:
        return self._cluster

    async def set_many(self, pairs: Sequence[tuple[str, str]], ttl_s: int, *, what: str) -> int:
        return await self._set_many(pairs, ttl_s, what, 0, self.replica_wait_ms)

    async def _set_many(
        self,
        pairs: Sequence[tuple[str, str]],
        ttl_s: int,
        what: str,
        replicas: int,
        replica_wait_ms: int,
    ) -> int:
        """``SET key value EX ttl_s`` for each pair, in one round trip (per node). With
        ``replicas``, each node's part ends with ``WAIT``; returns the fewest replicas any
        node confirmed its part to (0 without; ``replicas`` when there is nothing to write)."""
        if not pairs:
            return replicas
        with redis_errors(what):
            if replicas:
                commands = [("SET", key, value, "EX", ttl_s) for key, value in pairs]
                _, confirmed = await self.lanes.pipeline_replicated(
                    commands, replicas, replica_wait_ms
                )
                return confirmed
            pipe = self.client.pipeline(transaction=False)
            for key, value in pairs:
                pipe.set(key, value, ex=ttl_s)
            await pipe.execute()
            return 0

    async def read(
        self, stream: StreamRef, group: str, consumer: str, count: int, block_ms: int | None
    ) -> list[RawEntry]:
        """New entries (``>``), blocking up to ``block_ms`` when there are none."""
        return await self._xreadgroup(stream, group, consumer, count, block_ms, ">")

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
        """The release script (its fair queue's next tasks moved in) and a read that does
        not block, in one transaction (MULTI/EXEC: one step, so a reader blocked on the
        stream cannot take what this one moved before it reads), the read's reply straight
        from XREADGROUP rather than through the script (docs/benchmarks.md, "Fair share:
        a stream per key"). Only when that finds nothing, the blocking read: the enqueue
        script puts a task straight into a stream with nothing unread, which wakes it."""
        script: Any = self.scripts.release_capped if cap else self.scripts.release
        keys, tier = stream.keys, stream.tier
        names = [stream.name, keys.fair(tier), keys.fair_clock(tier)]
        if cap:  # the capped script's extra key and argument
            names.append(keys.fair_running(tier))
        names.append(keys.fair_held(tier))
        args = (group, count, cap) if cap else (count,)
        run = ("EVALSHA", script.sha, len(names), *names, *args)

        async def exchange(wanted: int) -> tuple[Any, list[RawEntry]]:
            """The script's reply (an error in its place) and what the read with it got;
            every reply is read: the read's entries are this consumer's now, whatever the
            script answered."""
            if not wanted:
                (moved,) = await self.lanes.pipeline([run], raise_on_error=False)
                return moved, []
            xread = ("XREADGROUP", "GROUP", group, consumer, "COUNT", wanted)
            commands = [("MULTI",), run, (*xread, "STREAMS", stream.name, ">"), ("EXEC",)]
            with redis_errors(f"release and read {stream.name}"):
                replies = await self.lanes.pipeline(commands, raise_on_error=False)
                done = replies[-1]
                if isinstance(done, Exception):  # EXECABORT: refused when queued, none ran
                    queued = [r for r in replies[1:-1] if isinstance(r, Exception)]
                    if queued and isinstance(queued[0], rex.NoScriptError):
                        return queued[0], []
                    raise queued[0] if queued else done
                moved, read = done
                if isinstance(read, Exception):
                    raise read
            return moved, _read_entries(read)

        async def release() -> tuple[list[RawEntry], bool]:
            moved, entries = await exchange(count)
            if isinstance(moved, rex.NoScriptError):  # a restart or SCRIPT FLUSH
                with redis_errors(f"load the release script of {stream.name}"):
                    await self.lanes.load_script(script.script)
                moved, more = await exchange(count - len(entries))
                entries += more
            if isinstance(moved, Exception):
                with redis_errors(f"release {stream.name}"):
                    raise moved
            # the capped script says whether tasks wait for a slot or hold one
            return entries, bool(moved) if cap else False

        async def read(wait: int | None) -> list[RawEntry]:
            return await self.read(stream, group, consumer, count, wait)

        return await read_while_busy(release, read, block_ms)

    async def read_own_pending(
        self, stream: StreamRef, group: str, consumer: str, count: int, after: str
    ) -> list[RawEntry]:
        """This consumer's own pending entries after ``after`` (history read, id 0)."""
        return await self._xreadgroup(stream, group, consumer, count, None, after)

    async def _xreadgroup(
        self,
        stream: StreamRef,
        group: str,
        consumer: str,
        count: int,
        block_ms: int | None,
        start: str,
    ) -> list[RawEntry]:
        command: tuple[Any, ...] = ("XREADGROUP", "GROUP", group, consumer, "COUNT", count)
        if block_ms is not None:
            longest = self.lanes.longest_block_ms
            command += ("BLOCK", block_ms if longest is None else min(block_ms, longest))
        with redis_errors(f"XREADGROUP {stream.name} from {start}"):
            reply = await self.lanes.call(*command, "STREAMS", stream.name, start)
        return _read_entries(reply)

    async def claim_stale(
        self,
        stream: StreamRef,
        group: str,
        consumer: str,
        min_idle_ms: int,
        count: int,
        cursor: ReclaimCursor,
    ) -> Claimed:
        start = cursor.position
        with redis_errors(f"XAUTOCLAIM {stream.name}"):
            reply = await self.lanes.call(
                "XAUTOCLAIM", stream.name, group, consumer, min_idle_ms, start, "COUNT", count
            )
        # 7.0+ adds a third element: ids whose bodies are gone (already removed from the PEL).
        deleted = [i.decode() for i in reply[2]] if len(reply) > 2 else []
        if any(entry is None or entry[0] is None for entry in reply[1]):
            # 6.2 claims such an entry but answers nil in its place: find it among our own
            # pending entries, where it shows with an empty body.
            deleted += await self._own_bodiless(stream, group, consumer)
        return Claimed(_entries(reply[1]), deleted, ReclaimCursor(reply[0].decode()))

    async def _own_bodiless(self, stream: StreamRef, group: str, consumer: str) -> list[str]:
        found: list[str] = []
        after = "0"
        while True:
            page = await self.read_own_pending(stream, group, consumer, 1000, after)
            if not page:
                return found
            found += [e.entry_id for e in page if e.fields is None]
            after = page[-1].entry_id

    async def begin(
        self,
        stream: StreamRef,
        group: str,
        consumer: str,
        items: Sequence[BeginItem],
        *,
        fresh: bool = False,
    ) -> list[Begun]:
        """``fresh``: the entries were just read with ``>`` by this consumer, so their owner
        is not checked here (the commit checks it)."""
        keys = [stream.name, stream.keys.outbox, *(stream.keys.task(i.task_id) for i in items)]
        args: list[Any] = [group, consumer, now_ms(), "1" if fresh else "0"]
        for item in items:
            args += (
                item.entry_id,
                item.attempt,
                open_started(item.started) if item.started is not None else b"",
            )
        with redis_errors(f"begin on {stream.name}"):
            (reply,) = await self._evalsha(self.scripts.begin, [(keys, args)])
        return [_begun(r) for r in reply]

    async def commit(
        self, stream: StreamRef, group: str, consumer: str, items: Sequence[CommitItem]
    ) -> list[Outcome]:
        (statuses,) = await self.commit_streams(group, consumer, [(stream, items)])
        return statuses

    def _commit_call(
        self, stream: StreamRef, group: str, consumer: str, at: int, items: Sequence[CommitItem]
    ) -> tuple[list[str], list[Any]]:
        shard = stream.keys
        keys = [stream.name, shard.outbox, *(shard.task(i.task_id) for i in items)]
        keys += [shard.steps(i.task_id) for i in items]
        args: list[Any] = [group, consumer, at, self.result_ttl_s]
        for item in items:
            args += (item.entry_id, item.result_json, item.reply, encode_events(item.events))
        return keys, args

    async def commit_streams(
        self,
        group: str,
        consumer: str,
        batches: Sequence[tuple[StreamRef, Sequence[CommitItem]]],
    ) -> list[list[Outcome]]:
        """Commit batches of several streams in one round trip: one script call per stream
        (each in its own shard's slot, every key in KEYS), sent together in one pipeline."""
        at = now_ms()
        calls = [self._commit_call(stream, group, consumer, at, items) for stream, items in batches]
        with redis_errors(f"commit on {batches[0][0].name}" if len(batches) == 1 else "commit"):
            replies = await self._evalsha(self.scripts.commit, calls)
        return [[_OUTCOME[status] for status in reply] for reply in replies]

    async def reschedule(
        self, stream: StreamRef, group: str, consumer: str, item: Reschedule
    ) -> Outcome:
        member = orjson.dumps(
            {
                "tier": item.tier,
                "task": item.task_json.decode(),
                "attempt": item.attempt,
                "reply": item.reply,
                "entry": item.entry_id,  # keeps members unique
            }
        )
        keys = [
            stream.name,
            stream.keys.task(item.task_id),
            stream.keys.delayed,
            stream.keys.outbox,
        ]
        args: list[Any] = [
            group,
            consumer,
            item.entry_id,
            item.due_ms,
            member,
            encode_events(item.events),
            "1" if item.counted else "0",
            item.spent_tokens,
            repr(item.spent_cost_usd),
        ]
        with redis_errors(f"reschedule on {stream.name}"):
            return _OUTCOME[await self.scripts.reschedule(keys=keys, args=args)]

    async def dead_letter(
        self, stream: StreamRef, group: str, consumer: str, item: DeadLetter
    ) -> Outcome:
        task_key = stream.keys.task(item.task_id or "-")
        steps_key = stream.keys.steps(item.task_id or "-")
        keys = [stream.name, task_key, stream.keys.dlq, stream.keys.outbox, steps_key]
        args: list[Any] = [
            group,
            consumer,
            item.entry_id,
            item.reason,
            item.error,
            now_ms(),
            item.result_json if item.task_id else b"",
            item.reply,
            self.result_ttl_s,
            encode_events(item.events),
            "1" if item.check_owner else "0",
            "1" if item.salvaged else "0",
            encode_events(item.unbound_events),
        ]
        with redis_errors(f"dead-letter on {stream.name}"):
            return _OUTCOME[await self.scripts.dead_letter(keys=keys, args=args)]

    async def touch(
        self, stream: StreamRef, group: str, consumer: str, entry_ids: Sequence[str]
    ) -> list[str]:
        if not entry_ids:
            return []
        with redis_errors(f"heartbeat on {stream.name}"):
            lost = await self.scripts.touch(keys=[stream.name], args=[group, consumer, *entry_ids])
        return [_s(i) for i in lost]

    async def deliveries(self, stream: StreamRef, task_ids: Sequence[str]) -> list[int]:
        """How many deliveries each task has had so far: 0 for an unknown task, and for a
        count that is not a number (as the begin script reads it, which then writes 1)."""
        commands = [("HGET", stream.keys.task(task_id), "deliveries") for task_id in task_ids]
        with redis_errors(f"delivery counts on {stream.name}"):
            replies = await self.lanes.pipeline(commands)
        return [int(n) if n and n.isdigit() else 0 for n in replies]

    async def cancelled(self, stream: StreamRef, task_ids: Sequence[str]) -> list[str]:
        commands = [("HGET", stream.keys.task(task_id), "cancelled") for task_id in task_ids]
        with redis_errors(f"cancels on {stream.name}"):
            replies = await self.lanes.pipeline(commands)
        return [t for t, flag in zip(task_ids, replies, strict=True) if flag]

    async def hand_back(
        self,
        stream: StreamRef,
        group: str,
        consumer: str,
        items: Sequence[Held],
        idle_ms: int,
    ) -> list[str]:
        """Entries this consumer gives up unfinished at a graceful
        shutdown: claimable at once, and their deliveries not counted."""
        if not items:
            return []
        with redis_errors(f"hand back on {stream.name}"):
            lost = await self.scripts.hand_back(
                keys=[stream.name, *(stream.keys.task(item.task_id) for item in items)],
                args=[group, consumer, idle_ms, *(item.entry_id for item in items)],
            )
        return [_s(i) for i in lost]

    async def prune_consumers(
        self, stream: StreamRef, group: str, consumer: str, min_idle_ms: int
    ) -> list[str]:
        """Remove the group's consumers idle that long with nothing pending (dead workers'
        names, which would otherwise pile up with every restart under a new name)."""
        with redis_errors(f"prune consumers of {stream.name}"):
            removed = await self.scripts.prune_consumers(
                keys=[stream.name], args=[group, min_idle_ms, consumer]
            )
        return [_s(name) for name in removed]

    async def expose(self, stream: StreamRef, group: str, dead: str, idle_ms: int) -> int:
        with redis_errors(f"expose {dead}'s entries on {stream.name}"):
            n = await self.scripts.expose(
                keys=[stream.name], args=[group, dead, idle_ms, EXPOSE_MOST]
            )
        return int(n)

    async def promote_due(
        self, keys: ShardKeys, tiers: Sequence[str], limit: int = 500
    ) -> Promoted:
        with redis_errors(f"promote {keys.delayed}"):
            moved, dead, waits, damaged = await self.scripts.promote(
                keys=[keys.delayed, keys.dlq, *(keys.stream(t) for t in tiers)],
                args=[now_ms(), limit, *tiers],
            )
        pairs = zip(damaged[::2], damaged[1::2], strict=True)
        return Promoted(
            int(moved),
            int(dead),
            tuple(_s(w) for w in waits),
            tuple((_s(task_id), _s(error)) for task_id, error in pairs),
        )

    async def end_damaged(
        self, keys: ShardKeys, task_id: str, result_json: bytes, events: Sequence[AuditEvent]
    ) -> Cancelled | TaskState:
        with redis_errors(f"end task {task_id}"):
            status = await self.scripts.end_damaged(
                keys=[keys.task(task_id), keys.outbox, keys.steps(task_id)],
                args=[result_json, now_ms(), self.result_ttl_s, encode_events(events)],
            )
        return _cancelled(status)

    async def replay(
        self, keys: ShardKeys, dlq_entry: str, tier: str, task_id: str, task_json: bytes, reply: str
    ) -> tuple[Replayed, str]:
        with redis_errors(f"replay from {keys.dlq}"):
            status, entry = await self.scripts.replay(
                keys=[keys.dlq, keys.stream(tier), keys.task(task_id), keys.steps(task_id)],
                args=[dlq_entry, task_json, now_ms(), reply],
            )
        return _REPLAYED[status], _s(entry)

    async def move_unstarted(
        self, source: StreamRef, target: StreamRef, group: str, *, limit: int = 500
    ) -> Moved:
        """Candidates are read here (entries after the group's last-delivered id); the
        script checks each again and moves it, so an entry a worker read meanwhile stays."""
        entries = delayed = 0
        for _ in range(_MOVE_ROUNDS):
            with redis_errors(f"move unstarted entries of {source.name}"):
                last = await self._last_delivered(source, group)
                found = await self.client.xrange(
                    source.name, "-" if last is None else f"({last}", "+", count=limit
                )
                ids = [_s(entry_id) for entry_id, _ in found]
                hashes = [source.keys.task(task_id_of(fields)) for _, fields in found]
                moved, moved_delayed = await self.scripts.move(
                    keys=[source.name, target.name, source.keys.delayed, target.keys.delayed,
                          *hashes],
                    args=[group, limit, *ids],
                )  # fmt: skip
            entries, delayed = entries + int(moved), delayed + int(moved_delayed)
            if not found and int(moved_delayed) < limit:
                break
        return Moved(entries, delayed)

    async def _last_delivered(self, stream: StreamRef, group: str) -> str | None:
        try:
            groups = await self.client.xinfo_groups(stream.name)
        except rex.ResponseError as exc:
            if "no such key" in str(exc).lower():
                return None
            raise
        for info in groups:
            if _s(info["name"]) == group:
                return _s(info["last-delivered-id"])
        return None

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
        with redis_errors("cancel"):
            status = await self.scripts.cancel(
                keys=[
                    keys.task(task_id),
                    keys.outbox,
                    keys.steps(task_id),
                    keys.delayed,
                    keys.waiting,
                    keys.question(task_id),
                ],
                args=[
                    result_json,
                    now_ms(),
                    self.result_ttl_s,
                    encode_events(events),
                    task_id,
                    "1" if running else "",
                    notify,
                ],
            )
        return _cancelled(status)

    async def record_steps(
        self, group: str, consumer: str, items: Sequence[tuple[StreamRef, StepRecord]]
    ) -> list[Outcome]:
        calls = []
        for stream, item in items:
            shard = stream.keys
            keys = [stream.name, shard.task(item.task_id), shard.steps(item.task_id), shard.outbox]
            args: list[Any] = [group, consumer, item.entry_id, encode_events(item.events)]
            for name, value in item.fields:
                args += (name, value)
            calls.append((keys, args))
        with redis_errors("record steps"):
            replies = await self._evalsha(self.scripts.record_steps, calls)
        return [_OUTCOME[status] for status in replies]

    async def load_steps(self, keys: ShardKeys, task_id: str) -> dict[str, bytes]:
        with redis_errors(f"load steps of {task_id}"):
            (flat,) = await self.lanes.pipeline([("HGETALL", keys.steps(task_id))])
        if isinstance(flat, dict):
            return {_s(name): value for name, value in flat.items()}
        it = iter(flat)
        return {_s(name): value for name, value in zip(it, it, strict=True)}

    async def stream_stats(self, stream: StreamRef, group: str) -> StreamStats:
        stats = StreamStats(stream=stream.name)
        with redis_errors(f"stats of {stream.name}"):
            pipe = self.client.pipeline(transaction=False)
            pipe.xlen(stream.name)
            pipe.xpending(stream.name, group)
            pipe.xpending_range(stream.name, group, min="-", max="+", count=1)
            pipe.xinfo_groups(stream.name)
            # The held set (tasks of keys at their cap) is empty unless the tier has a cap.
            keys, tier = stream.keys, stream.tier
            stats.fair = int(await self.client.zcard(keys.fair(tier))) + int(
                await self.client.zcard(keys.fair_held(tier))
            )
            try:
                length, summary, oldest, groups = await pipe.execute()
            except rex.ResponseError:  # no stream or no group yet
                # A stream no worker ever read has no group, but its tasks still count:
                # every one of them is unread (a tier or shard nobody reads, placement).
                stats.length = stats.lag = int(await self.client.xlen(stream.name))
                return stats
        stats.length = int(length)
        stats.pending = int(summary["pending"])
        if oldest:
            stats.oldest_pending_ms = int(oldest[0]["time_since_delivered"])
        for info in groups:
            if _s(info["name"]) == group:
                # The group's consumers, idle ones included (XPENDING's summary names only
                # the consumers that hold pending entries: 0 on a stream kept up with).
                stats.consumers = int(info.get("consumers") or 0)
                lag = info.get("lag")
                stats.lag = int(lag) if lag is not None else None
        return stats

    async def shard_backlog(self, keys: ShardKeys) -> tuple[int, int]:
        """(dead letters, delayed retries) of one shard. The delayed set also holds the
        deadline of each waiting task's wait, one per task in the waiting index: not counted."""
        with redis_errors("status"):
            dlq = await self.client.xlen(keys.dlq)
            delayed = await self.client.zcard(keys.delayed)
            waits = await self.client.zcard(keys.waiting)
        return int(dlq), max(0, int(delayed) - int(waits))

    async def oldest_idle_ms(
        self, streams: Sequence[tuple[str, str]], scan: int
    ) -> list[int | None]:
        """Per (stream name, group): the longest idle time among its first ``scan`` pending
        entries, in one round trip; None where the stream or group is missing or empty."""
        with redis_errors("scan pending entries"):
            pipe = self.client.pipeline(transaction=False)
            for stream, group in streams:
                pipe.xpending_range(stream, group, min="-", max="+", count=scan)
            replies = await pipe.execute(raise_on_error=False)
        return [
            max(int(e["time_since_delivered"]) for e in entries)
            if isinstance(entries, list) and entries
            else None
            for entries in replies
        ]

    async def outbox_lengths(self, shards: Sequence[ShardKeys]) -> list[int]:
        """The audit outbox length of each shard (acked entries are deleted: the backlog)."""
        with redis_errors("measure audit outbox"):
            pipe = self.client.pipeline(transaction=False)
            for keys in shards:
                pipe.xlen(keys.outbox)
            lengths = await pipe.execute()
        return [int(n) for n in lengths]


def _begun(reply: list[Any]) -> Begun:
    """One entry of the begin script's answer (``lua/begin.lua``)."""
    if len(reply) < 4:
        return Begun(_OUTCOME[reply[0]], reply[1], len(reply) > 2 and reply[2] == 1)
    return Begun(
        _OUTCOME[reply[0]],
        reply[1],
        reply[2] == 1,
        first_ms=_int_or(reply[3]),
        spent_tokens=_int_or(reply[4]),
        spent_cost_usd=_float_or(reply[5]),
    )


def _int_or(value: bytes) -> int:
    """A number a script read from a task hash; 0 when it is not one (a damaged field)."""
    try:
        return int(value)
    except ValueError:
        return 0


def _float_or(value: bytes) -> float:
    try:
        number = float(value)
    except ValueError:
        return 0.0
    return number if math.isfinite(number) else 0.0
