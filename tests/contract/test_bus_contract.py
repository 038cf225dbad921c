"""The delivery protocol's properties (DESIGN.md, "Delivery protocol"), each held to every
bus alike: what one bus does here, the other must do too. Only properties that need no
process kill; the crash cases stay in tests/e2e."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TypeVar

import orjson
import pytest
from redis.asyncio import RedisCluster

from deepagents.contract.event_sink import event_sink
from deepagents.errors import GroupVanished
from deepagents.orchestrator.replies import Replies
from deepagents.store.tasks import Location
from deepagents.transport.base import (
    RECLAIM_START,
    Admitted,
    BeginItem,
    CommitItem,
    DeadLetter,
    Enqueue,
    Fairness,
    Held,
    Moved,
    Park,
    RawEntry,
    ReclaimCursor,
    Reschedule,
    StepRecord,
    StreamRef,
    Waiting,
    WaitingCursor,
    now_ms,
)
from deepagents.transport.memory import MemoryBus
from deepagents.transport.redis_streams.bus import RedisStreamBus
from tests.contract.conftest import AGENT, Backend
from tests.support.wait import eventually

LOCATION = Location(AGENT, 0, "p2")
T = TypeVar("T")


def _task(task_id: str) -> bytes:
    return orjson.dumps({"task_id": task_id, "intent": "echo", "payload": {}})


async def _submit(b: Backend, task_id: str, task_json: bytes | None = None) -> str:
    status, entry_id = await b.bus.enqueue(
        b.ref(), task_id, task_json or _task(task_id), reply="", max_backlog=100
    )
    assert status == "ok"
    return entry_id


async def _take(b: Backend, consumer: str, count: int = 1) -> list[RawEntry]:
    return await b.bus.read(b.ref(), AGENT, consumer, count, None)


async def _begin(b: Backend, consumer: str, entry_id: str, task_id: str, fresh: bool) -> str:
    (begun,) = await b.bus.begin(
        b.ref(), AGENT, consumer, [BeginItem(entry_id, task_id, 1)], fresh=fresh
    )
    return begun.status


async def _commit(b: Backend, consumer: str, entry_id: str, task_id: str, result: bytes) -> str:
    (status,) = await b.bus.commit(
        b.ref(), AGENT, consumer, [CommitItem(entry_id, task_id, result)]
    )
    return status


async def _state(b: Backend, task_id: str) -> str | None:
    return (await b.tasks.task_fields(LOCATION, task_id)).get("state")


async def test_a_result_is_committed_once(backend: Backend) -> None:
    entry_id = await _submit(backend, "t1")
    assert [e.entry_id for e in await _take(backend, "c1")] == [entry_id]
    assert await _begin(backend, "c1", entry_id, "t1", fresh=True) == "ok"
    assert await _commit(backend, "c1", entry_id, "t1", b'{"n":1}') == "ok"
    # Sent again after an ambiguous failure: answered ok, and the first result stands.
    assert await _commit(backend, "c1", entry_id, "t1", b'{"n":2}') == "ok"
    assert await backend.tasks.terminal_result(AGENT, 0, "t1") == b'{"n":1}'
    stats = await backend.bus.stream_stats(backend.ref(), AGENT)
    assert (stats.length, stats.pending) == (0, 0)
    assert await _begin(backend, "c1", entry_id, "t1", fresh=False) == "gone"


async def test_a_commit_after_a_reclaim_changes_nothing(backend: Backend) -> None:
    entry_id = await _submit(backend, "t1")
    await _take(backend, "c1")
    assert await _begin(backend, "c1", entry_id, "t1", fresh=True) == "ok"
    claimed = await backend.bus.claim_stale(backend.ref(), AGENT, "c2", 0, 10, RECLAIM_START)
    assert [e.entry_id for e in claimed.entries] == [entry_id]
    assert await _commit(backend, "c1", entry_id, "t1", b'{"by":"c1"}') == "lost"
    assert await _state(backend, "t1") == "running"
    assert await backend.tasks.terminal_result(AGENT, 0, "t1") is None
    assert await _begin(backend, "c2", entry_id, "t1", fresh=False) == "ok"
    assert await backend.bus.deliveries(backend.ref(), ["t1"]) == [2]
    assert await _commit(backend, "c2", entry_id, "t1", b'{"by":"c2"}') == "ok"
    assert await _commit(backend, "c1", entry_id, "t1", b'{"by":"c1"}') == "lost"
    assert await backend.tasks.terminal_result(AGENT, 0, "t1") == b'{"by":"c2"}'


async def test_an_entry_is_reclaimed_only_once_idle_for_the_visibility_timeout(
    backend: Backend,
) -> None:
    entry_id = await _submit(backend, "t1")
    await _take(backend, "c1")
    early = await backend.bus.claim_stale(backend.ref(), AGENT, "c2", 60_000, 10, RECLAIM_START)
    assert early.entries == [] and early.deleted == []
    assert await backend.bus.touch(backend.ref(), AGENT, "c1", [entry_id]) == []

    async def reclaimed() -> list[RawEntry]:
        found = await backend.bus.claim_stale(backend.ref(), AGENT, "c2", 150, 10, RECLAIM_START)
        return found.entries

    assert [e.entry_id for e in await eventually(reclaimed, timeout=10)] == [entry_id]
    # The heartbeat of the worker that lost it takes nothing back.
    assert await backend.bus.touch(backend.ref(), AGENT, "c1", [entry_id]) == [entry_id]


async def test_a_retry_waits_for_its_backoff_then_comes_back_with_the_next_attempt(
    backend: Backend,
) -> None:
    entry_id = await _submit(backend, "t1")
    await _take(backend, "c1")
    assert await _begin(backend, "c1", entry_id, "t1", fresh=True) == "ok"
    due = now_ms() + 300
    retry = Reschedule(entry_id, "t1", due, "p2", _task("t1"), attempt=2)
    assert await backend.bus.reschedule(backend.ref(), AGENT, "c1", retry) == "ok"
    assert await _state(backend, "t1") == "retrying"
    assert await backend.bus.shard_backlog(backend.ref().keys) == (0, 1)
    assert (await backend.bus.promote_due(backend.ref().keys, ["p0", "p2"])).moved == 0
    assert await _take(backend, "c1") == []

    async def promoted() -> int:
        return (await backend.bus.promote_due(backend.ref().keys, ["p0", "p2"])).moved

    assert await eventually(promoted, timeout=10) == 1
    assert now_ms() >= due
    (again,) = await _take(backend, "c2")
    assert again.fields is not None and again.fields[b"attempt"] == b"2"
    assert orjson.loads(again.fields[b"task"])["task_id"] == "t1"
    assert await _begin(backend, "c2", again.entry_id, "t1", fresh=True) == "ok"
    assert await backend.bus.deliveries(backend.ref(), ["t1"]) == [2]


async def test_a_wait_that_is_not_counted_gives_its_delivery_back(backend: Backend) -> None:
    """An open circuit's wait: rescheduled, attempt kept, and its delivery not counted, so
    however many times a task waits it never nears max_deliveries."""
    entry_id = await _submit(backend, "t1")
    for n in range(3):
        (entry,) = await _take(backend, "c1")
        assert await _begin(backend, "c1", entry.entry_id, "t1", fresh=True) == "ok"
        assert await backend.bus.deliveries(backend.ref(), ["t1"]) == [1]
        wait = Reschedule(entry.entry_id, "t1", now_ms(), "p2", _task("t1"), 1, counted=False)
        assert await backend.bus.reschedule(backend.ref(), AGENT, "c1", wait) == "ok"
        assert await backend.bus.deliveries(backend.ref(), ["t1"]) == [0], n
        assert (await backend.bus.promote_due(backend.ref().keys, ["p0", "p2"])).moved == 1
    assert entry_id  # the first delivery's entry, long since deleted
    (last,) = await _take(backend, "c1")
    assert last.fields is not None and last.fields[b"attempt"] == b"1"
    assert await _begin(backend, "c1", last.entry_id, "t1", fresh=True) == "ok"
    assert await backend.bus.deliveries(backend.ref(), ["t1"]) == [1]


async def test_the_last_allowed_delivery_is_dead_lettered_with_its_count(
    backend: Backend,
) -> None:
    entry_id = await _submit(backend, "t1")
    await _take(backend, "c1")
    assert await _begin(backend, "c1", entry_id, "t1", fresh=True) == "ok"
    for consumer in ("c2", "c3"):  # two workers die holding it; each reclaim is counted
        claimed = await backend.bus.claim_stale(
            backend.ref(), AGENT, consumer, 0, 10, RECLAIM_START
        )
        assert [e.entry_id for e in claimed.entries] == [entry_id]
        assert await _begin(backend, consumer, entry_id, "t1", fresh=False) == "ok"
    assert await backend.bus.deliveries(backend.ref(), ["t1"]) == [3]
    letter = DeadLetter(entry_id, "max_deliveries", "3 deliveries", "t1", b'{"dead":1}')
    assert await backend.bus.dead_letter(backend.ref(), AGENT, "c1", letter) == "lost"
    assert await backend.bus.dead_letter(backend.ref(), AGENT, "c3", letter) == "ok"
    (dead,) = await backend.tasks.dead_letters(AGENT, backend.ref().keys, 10)
    assert (dead.reason, dead.deliveries, dead.task_id) == ("max_deliveries", 3, "t1")
    assert await _state(backend, "t1") == "dead"
    assert await backend.tasks.terminal_result(AGENT, 0, "t1") == b'{"dead":1}'
    assert (await backend.bus.stream_stats(backend.ref(), AGENT)).pending == 0


async def test_a_cancelled_task_is_answered_and_its_delivery_acked_as_a_duplicate(
    backend: Backend,
) -> None:
    entry_id = await _submit(backend, "t1")
    keys = backend.ref().keys
    assert await backend.bus.cancel(keys, "t1", b'{"cancelled":1}', ()) == "ok"
    assert await backend.bus.cancel(keys, "t1", b"{}", ()) == "done"
    assert await backend.bus.cancel(keys, "nope", b"{}", ()) == "missing"
    assert await backend.tasks.terminal_result(AGENT, 0, "t1") == b'{"cancelled":1}'
    await _take(backend, "c1")
    assert await _begin(backend, "c1", entry_id, "t1", fresh=True) == "dup"
    assert (await backend.bus.stream_stats(backend.ref(), AGENT)).pending == 0
    running = await _submit(backend, "t2")
    await _take(backend, "c1")
    assert await _begin(backend, "c1", running, "t2", fresh=True) == "ok"
    assert await backend.bus.cancel(keys, "t2", b"{}", ()) == "running"


async def test_a_running_task_ends_once_whichever_of_its_cancel_and_commit_runs_first(
    backend: Backend,
) -> None:
    keys, channel = backend.ref().keys, backend.keys.cancel_channel(AGENT)
    heard: list[bytes] = []
    listener = backend.bus.reply_listener(channel, heard.append)
    await listener.open()
    reading = asyncio.create_task(listener.run())
    try:
        # The cancel first: the task is answered, its id published on the agent's cancel
        # channel, and its worker's commit finds it done (a duplicate: its entry acked).
        first = await _submit(backend, "t1")
        await _take(backend, "c1")
        assert await _begin(backend, "c1", first, "t1", fresh=True) == "ok"
        assert (
            await backend.bus.cancel(keys, "t1", b'{"c":1}', (), running=True, notify=channel)
            == "ok"
        )
        assert await _commit(backend, "c1", first, "t1", b'{"n":1}') == "dup"
        assert await backend.tasks.terminal_result(AGENT, 0, "t1") == b'{"c":1}'
        assert await eventually(lambda: _value(heard), timeout=10) == [b"t1"]
        # The commit first: the cancel is too late, and nothing is published.
        second = await _submit(backend, "t2")
        await _take(backend, "c1")
        assert await _begin(backend, "c1", second, "t2", fresh=True) == "ok"
        assert await _commit(backend, "c1", second, "t2", b'{"n":2}') == "ok"
        assert (
            await backend.bus.cancel(keys, "t2", b"{}", (), running=True, notify=channel) == "done"
        )
        assert await backend.tasks.terminal_result(AGENT, 0, "t2") == b'{"n":2}'
        assert (await backend.bus.stream_stats(backend.ref(), AGENT)).pending == 0
        # A queued task's cancel tells no worker: none runs it.
        await _submit(backend, "t3")
        assert await backend.bus.cancel(keys, "t3", b"{}", (), running=True, notify=channel) == "ok"
        await backend.bus.cancel(keys, "t1", b"{}", (), running=True, notify=channel)
        probe = await _submit(backend, "t4")  # a marker: published after t3's cancel
        await _take(backend, "c1", 2)
        assert await _begin(backend, "c1", probe, "t4", fresh=True) == "ok"
        assert await backend.bus.cancel(keys, "t4", b"{}", (), running=True, notify=channel) == "ok"
        await eventually(lambda: _value(len(heard) == 2), timeout=10)
        assert heard == [b"t1", b"t4"]
        # What the heartbeat asks, for a message lost while a worker's channel was down.
        ids = ["t1", "t2", "t3", "t4", "nope"]
        assert await backend.bus.cancelled(backend.ref(), ids) == ["t1", "t3", "t4"]
    finally:
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
        await listener.aclose()


async def test_a_task_begun_again_learns_its_first_start_and_earlier_spend(
    backend: Backend,
) -> None:
    entry_id = await _submit(backend, "t1")
    await _take(backend, "c1")
    (first,) = await backend.bus.begin(
        backend.ref(), AGENT, "c1", [BeginItem(entry_id, "t1", 1)], fresh=True
    )
    assert (first.status, first.first_ms, first.spent_tokens) == ("ok", 0, 0)
    started = int((await backend.tasks.task_fields(LOCATION, "t1"))["first_ms"])
    retry = Reschedule(entry_id, "t1", 0, "p2", _task("t1"), 2, spent_tokens=30,
                       spent_cost_usd=0.25)  # fmt: skip
    assert await backend.bus.reschedule(backend.ref(), AGENT, "c1", retry) == "ok"
    assert (await backend.bus.promote_due(backend.ref().keys, ["p2"])).moved == 1
    (entry,) = await _take(backend, "c2")
    (again,) = await backend.bus.begin(
        backend.ref(), AGENT, "c2", [BeginItem(entry.entry_id, "t1", 2)], fresh=True
    )
    assert again.status == "ok" and again.deliveries == 2
    assert (again.first_ms, again.spent_tokens, again.spent_cost_usd) == (started, 30, 0.25)


async def test_a_damaged_retry_member_names_its_task_which_then_ends_dead_once(
    backend: Backend,
) -> None:
    keys, channel = backend.ref().keys, "reply-of-t1"
    status, entry_id = await backend.bus.enqueue(
        backend.ref(), "t1", _task("t1"), reply=channel, max_backlog=100
    )
    assert status == "ok"
    heard: list[bytes] = []
    listener = backend.bus.reply_listener(channel, heard.append)
    await listener.open()
    reading = asyncio.create_task(listener.run())
    try:
        await _take(backend, "c1")
        assert await _begin(backend, "c1", entry_id, "t1", fresh=True) == "ok"
        damaged = orjson.dumps({"tier": "p2", "task": _task("t1").decode(), "attempt": "x"})
        retry = Reschedule(entry_id, "t1", 0, "p2", _task("t1"), 2)
        assert await backend.bus.reschedule(backend.ref(), AGENT, "c1", retry) == "ok"
        # the member as a damaged copy would be: its task readable, its attempt not
        await backend.bus.promote_due(keys, ["p2"], limit=0)
        assert await _state(backend, "t1") == "retrying"
        await _replace_delayed(backend, damaged)
        promoted = await backend.bus.promote_due(keys, ["p2"])
        error = "attempt is not an integer >= 1"
        assert (promoted.moved, promoted.dead_lettered, promoted.damaged) == (
            0,
            1,
            (("t1", error),),
        )
        assert await backend.bus.end_damaged(keys, "t1", b'{"dead":1}', ()) == "ok"
        assert await backend.bus.end_damaged(keys, "t1", b'{"dead":2}', ()) == "dead"
        assert await backend.bus.end_damaged(keys, "nope", b"{}", ()) == "missing"
        assert await _state(backend, "t1") == "dead"
        assert await backend.tasks.terminal_result(AGENT, 0, "t1") == b'{"dead":1}'
        assert await eventually(lambda: _value(heard), timeout=10) == [b'{"dead":1}']
    finally:
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
        await listener.aclose()


async def _replace_delayed(b: Backend, member: bytes) -> None:
    """The shard's delayed set holds ``member`` alone, due now (a damaged copy)."""
    delayed = b.ref().keys.delayed
    if isinstance(b.bus, MemoryBus):
        b.bus.state.delayed[delayed] = {member: 0}
        return
    client = b.bus.client  # type: ignore[attr-defined]
    await client.delete(delayed)
    await client.zadd(delayed, {member: 0})


async def _value(value: T) -> T:
    return value


async def _schedule(b: Backend, task_id: str, due: int, max_backlog: int = 100) -> str:
    ((status, entry_id),) = await b.bus.enqueue_many(
        [Enqueue(b.ref(), task_id, _task(task_id))], max_backlog=max_backlog, due_ms=[due]
    )
    return f"{status} {entry_id}".strip()


async def test_a_scheduled_task_is_queued_only_once_due(backend: Backend) -> None:
    keys = backend.ref().keys
    due = now_ms() + 300
    assert await _schedule(backend, "t1", due) == "ok"
    fields = await backend.tasks.task_fields(LOCATION, "t1")
    assert (fields["state"], fields["due_ms"], fields["tier"]) == ("scheduled", str(due), "p2")
    assert await _schedule(backend, "t1", due) == "exists"  # idempotent on task_id
    assert (await backend.bus.promote_due(keys, ["p0", "p2"])).moved == 0
    assert await _take(backend, "c1") == []

    async def promoted() -> int:
        return (await backend.bus.promote_due(keys, ["p0", "p2"])).moved

    assert await eventually(promoted, timeout=10) == 1
    assert now_ms() >= due
    (entry,) = await _take(backend, "c1")
    assert entry.fields is not None and entry.fields[b"attempt"] == b"1"
    assert orjson.loads(entry.fields[b"task"])["task_id"] == "t1"
    assert await _begin(backend, "c1", entry.entry_id, "t1", fresh=True) == "ok"
    assert await _state(backend, "t1") == "running"


async def test_a_task_scheduled_in_the_past_or_now_is_queued_at_once(backend: Backend) -> None:
    ((status, entry_id),) = await backend.bus.enqueue_many(
        [Enqueue(backend.ref(), "t1", _task("t1"))], max_backlog=100, due_ms=[0]
    )
    assert status == "ok" and entry_id
    assert await _state(backend, "t1") == "queued"


async def test_a_scheduled_task_is_admitted_against_its_tier_s_backlog(backend: Backend) -> None:
    await _submit(backend, "t1")
    assert await _schedule(backend, "t2", now_ms() + 60_000, max_backlog=1) == "overloaded"
    assert await _state(backend, "t2") is None


async def test_a_task_cancelled_while_scheduled_never_begins(backend: Backend) -> None:
    keys = backend.ref().keys
    assert await _schedule(backend, "t1", now_ms()) == "ok"
    assert await backend.bus.cancel(keys, "t1", b'{"cancelled":1}', ()) == "ok"
    assert await backend.tasks.terminal_result(AGENT, 0, "t1") == b'{"cancelled":1}'
    assert (await backend.bus.promote_due(keys, ["p0", "p2"])).moved == 1
    (entry,) = await _take(backend, "c1")
    assert await _begin(backend, "c1", entry.entry_id, "t1", fresh=True) == "dup"
    assert (await backend.bus.stream_stats(backend.ref(), AGENT)).pending == 0


async def test_submitting_a_task_id_again_enqueues_nothing(backend: Backend) -> None:
    entry_id = await _submit(backend, "t1")
    again = await backend.bus.enqueue(backend.ref(), "t1", _task("t1"), reply="", max_backlog=100)
    assert again == ("exists", entry_id)
    full = await backend.bus.enqueue(backend.ref(), "t2", _task("t2"), reply="", max_backlog=1)
    assert full == ("overloaded", "")
    assert (await backend.bus.stream_stats(backend.ref(), AGENT)).length == 1


async def test_entries_handed_back_at_shutdown_are_claimable_at_once_and_not_counted(
    backend: Backend,
) -> None:
    ids = [await _submit(backend, f"t{n}") for n in range(2)]
    await _take(backend, "c1", 2)
    assert await _begin(backend, "c1", ids[0], "t0", fresh=True) == "ok"
    items = [Held(ids[0], "t0"), Held(ids[1], "t1")]
    assert await backend.bus.hand_back(backend.ref(), AGENT, "c1", items, 60_000) == []
    assert await backend.bus.deliveries(backend.ref(), ["t0", "t1"]) == [0, 0]
    claimed = await backend.bus.claim_stale(backend.ref(), AGENT, "c2", 30_000, 10, RECLAIM_START)
    assert [e.entry_id for e in claimed.entries] == ids
    assert await backend.bus.hand_back(backend.ref(), AGENT, "c1", items, 60_000) == ids
    assert await _begin(backend, "c2", ids[0], "t0", fresh=False) == "ok"
    assert await backend.bus.deliveries(backend.ref(), ["t0"]) == [1]


async def test_a_dead_consumer_s_entries_are_exposed_to_a_reclaim_at_once(
    backend: Backend,
) -> None:
    """Its owner and delivery count unchanged until a live consumer claims them; another
    consumer's entries are left as they are."""
    ids = [await _submit(backend, f"t{n}") for n in range(4)]
    await _take(backend, "dead", 3)
    await _take(backend, "alive", 1)
    assert await _begin(backend, "dead", ids[0], "t0", fresh=True) == "ok"
    early = await backend.bus.claim_stale(backend.ref(), AGENT, "c2", 30_000, 10, RECLAIM_START)
    assert early.entries == []
    assert await backend.bus.expose(backend.ref(), AGENT, "dead", 30_000) == 3
    assert await backend.bus.deliveries(backend.ref(), ["t0"]) == [1]
    claimed = await backend.bus.claim_stale(backend.ref(), AGENT, "c2", 30_000, 10, RECLAIM_START)
    assert [e.entry_id for e in claimed.entries] == ids[:3]
    assert await backend.bus.expose(backend.ref(), AGENT, "dead", 30_000) == 0
    assert await backend.bus.touch(backend.ref(), AGENT, "dead", ids[:1]) == ids[:1]
    assert await _begin(backend, "c2", ids[0], "t0", fresh=False) == "ok"
    assert await backend.bus.deliveries(backend.ref(), ["t0"]) == [2]


async def test_one_bad_entry_does_not_sink_its_batch(backend: Backend) -> None:
    ids = [await _submit(backend, f"t{n}") for n in range(3)]
    bad = await _submit(backend, "bogus", b"not json")
    assert len(await _take(backend, "c1", 4)) == 4
    await backend.bus.claim_stale(
        backend.ref(), AGENT, "c2", 0, 1, ReclaimCursor(ids[1])
    )  # takes t1 only
    begun = await backend.bus.begin(
        backend.ref(), AGENT, "c1", [BeginItem(e, f"t{n}", 1) for n, e in enumerate(ids)]
    )
    assert [b.status for b in begun] == ["ok", "lost", "ok"]
    letter = DeadLetter(bad, "decode_error", "not JSON")
    assert await backend.bus.dead_letter(backend.ref(), AGENT, "c1", letter) == "ok"
    items = [CommitItem(e, f"t{n}", b"{}") for n, e in enumerate(ids)]
    assert await backend.bus.commit(backend.ref(), AGENT, "c1", items) == ["ok", "lost", "ok"]
    assert [await _state(backend, f"t{n}") for n in range(3)] == ["done", "queued", "done"]
    (dead,) = await backend.tasks.dead_letters(AGENT, backend.ref().keys, 10)
    assert (dead.reason, dead.task_id, dead.task_json) == ("decode_error", None, "not json")
    stats = await backend.bus.stream_stats(backend.ref(), AGENT)
    assert (stats.length, stats.pending) == (1, 1)  # only t1, now c2's


async def test_a_stream_no_group_reads_yet_still_counts_its_entries(backend: Backend) -> None:
    """A tier no worker ever read (placement) has no group; status must not show it empty."""
    unread = backend.ref("p1")  # _ready created groups on p0 and p2 only
    for n in range(2):
        status, _ = await backend.bus.enqueue(
            unread, f"u{n}", _task(f"u{n}"), reply="", max_backlog=100
        )
        assert status == "ok"
    stats = await backend.bus.stream_stats(unread, AGENT)
    assert (stats.length, stats.pending, stats.consumers, stats.lag) == (2, 0, 0, 2)


async def test_a_rollback_moves_each_unstarted_canary_entry_to_stable_once(
    backend: Backend,
) -> None:
    canary = StreamRef(backend.keys.shard(AGENT, 0, "1.3.0"), "p2")
    stable = StreamRef(backend.keys.shard(AGENT, 0, "1.2.0"), "p2")
    for ref in (canary, stable):
        await backend.bus.ensure_group(ref, AGENT)
    entries = {}
    for task_id in ("t0", "t1", "t2", "t3", "t4"):
        status, entries[task_id] = await backend.bus.enqueue(
            canary, task_id, _task(task_id), reply="", max_backlog=100
        )
        assert status == "ok"
    retried, started = await backend.bus.read(canary, AGENT, "canary-1", 2, None)
    assert [retried.entry_id, started.entry_id] == [entries["t0"], entries["t1"]]
    items = [BeginItem(retried.entry_id, "t0", 1), BeginItem(started.entry_id, "t1", 1)]
    await backend.bus.begin(canary, AGENT, "canary-1", items, fresh=True)
    # A retry of the canary's waits in the canary's own delayed set, not stable's.
    retry = Reschedule(retried.entry_id, "t0", now_ms() + 60_000, "p2", _task("t0"), attempt=2)
    assert await backend.bus.reschedule(canary, AGENT, "canary-1", retry) == "ok"
    assert await backend.bus.shard_backlog(canary.keys) == (0, 1)
    assert await backend.bus.shard_backlog(stable.keys) == (0, 0)

    moved = await backend.bus.move_unstarted(canary, stable, AGENT)
    assert moved == Moved(3, 1)
    assert await backend.bus.move_unstarted(canary, stable, AGENT) == Moved(0, 0)
    taken = await backend.bus.read(stable, AGENT, "stable-1", 10, None)
    assert sorted(orjson.loads((e.fields or {})[b"task"])["task_id"] for e in taken) == [
        "t2",
        "t3",
        "t4",
    ]
    assert await backend.bus.read(canary, AGENT, "canary-1", 10, None) == []
    assert await backend.bus.shard_backlog(stable.keys) == (0, 1)
    # Each moved task's hash names its new entry: stable's worker begins and commits it.
    for entry in taken:
        task_id = orjson.loads((entry.fields or {})[b"task"])["task_id"]
        fields = await backend.tasks.task_fields(LOCATION, task_id)
        assert fields["entry"] == entry.entry_id
        (begun,) = await backend.bus.begin(
            stable, AGENT, "stable-1", [BeginItem(entry.entry_id, task_id, 1)], fresh=True
        )
        assert begun.status == "ok"
        (done,) = await backend.bus.commit(
            stable, AGENT, "stable-1", [CommitItem(entry.entry_id, task_id, b'{"v":"s"}')]
        )
        assert done == "ok"
    # The started task stayed with its owner, whose commit still lands.
    (own,) = await backend.bus.commit(
        canary, AGENT, "canary-1", [CommitItem(started.entry_id, "t1", b'{"v":"c"}')]
    )
    assert own == "ok"
    assert await backend.tasks.terminal_result(AGENT, 0, "t1") == b'{"v":"c"}'


async def test_a_retry_comes_back_on_the_streams_of_its_own_version(backend: Backend) -> None:
    canary = StreamRef(backend.keys.shard(AGENT, 0, "1.3.0"), "p2")
    stable = StreamRef(backend.keys.shard(AGENT, 0, "1.2.0"), "p2")
    for ref in (canary, stable):
        await backend.bus.ensure_group(ref, AGENT)
    await backend.bus.enqueue(canary, "t1", _task("t1"), reply="", max_backlog=9)
    (entry,) = await backend.bus.read(canary, AGENT, "c1", 1, None)
    await backend.bus.begin(canary, AGENT, "c1", [BeginItem(entry.entry_id, "t1", 1)], fresh=True)
    retry = Reschedule(entry.entry_id, "t1", now_ms(), "p2", _task("t1"), attempt=2)
    assert await backend.bus.reschedule(canary, AGENT, "c1", retry) == "ok"
    assert (await backend.bus.promote_due(stable.keys, ["p2"])).moved == 0
    assert (await backend.bus.promote_due(canary.keys, ["p2"])).moved == 1
    assert await backend.bus.read(stable, AGENT, "s1", 10, None) == []
    (again,) = await backend.bus.read(canary, AGENT, "c2", 10, None)
    assert again.fields is not None and again.fields[b"attempt"] == b"2"


# waiting for a person (DESIGN.md, "Waiting for a human") ---------------------------------

TIERS = ["p0", "p2"]


def _park(entry_id: str, task_id: str, due_ms: int, ask: str = "1") -> Park:
    return Park(
        entry_id=entry_id,
        task_id=task_id,
        task_json=_task(task_id),
        tier="p2",
        ask=ask,
        question="approve?",
        schema_json=b'{"type":"object"}',
        on_timeout="fail",
        default_json=b"",
        due_ms=due_ms,
    )


async def _parked(b: Backend, task_id: str, due_ms: int | None = None) -> str:
    entry_id = await _submit(b, task_id)
    await _take(b, "c1")
    assert await _begin(b, "c1", entry_id, task_id, fresh=True) == "ok"
    park = _park(entry_id, task_id, due_ms or now_ms() + 60_000)
    assert await b.bus.park(b.ref(), AGENT, "c2", park) == "lost"  # not c2's entry
    assert await b.bus.park(b.ref(), AGENT, "c1", park) == "ok"
    return entry_id


async def test_a_parked_task_waits_holding_no_entry(backend: Backend) -> None:
    await _parked(backend, "t1")
    keys = backend.ref().keys
    assert await _state(backend, "t1") == "waiting"
    stats = await backend.bus.stream_stats(backend.ref(), AGENT)
    assert (stats.length, stats.pending) == (0, 0)
    (open_,) = await backend.bus.waiting(keys, 10)
    assert (open_.task_id, open_.ask, open_.question) == ("t1", "1", "approve?")
    asked = await backend.bus.asked(keys, "t1")
    assert (asked["question"], orjson.loads(asked["ask_schema"])) == (
        "approve?",
        {"type": "object"},
    )
    assert await backend.bus.waiting_count([keys]) == [1]
    assert await backend.bus.shard_backlog(keys) == (0, 0)  # its wait is not a delayed retry
    # Its wait is in the delayed set, not due yet: nothing to wake.
    assert (await backend.bus.promote_due(keys, TIERS)).waits == ()


async def test_one_reply_resumes_a_waiting_task_and_a_second_is_refused(backend: Backend) -> None:
    await _parked(backend, "t1")
    keys = backend.ref().keys
    answer = backend.bus.answer
    assert (await answer(keys, TIERS, "t1", "1", b'{"ok":true}', ())).status == "ok"
    assert (await answer(keys, TIERS, "t1", "1", b'{"ok":false}', ())).status == ("already_replied")
    assert (await backend.bus.ask_record(keys, "t1", "1")).answer_json == b'{"ok":true}'
    assert await _state(backend, "t1") == "queued"
    assert await backend.bus.waiting(keys, 10) == []
    assert await backend.bus.asked(keys, "t1") == {}
    assert await backend.bus.shard_backlog(keys) == (0, 0)  # its wait left the delayed set
    (entry,) = await _take(backend, "c1")
    assert entry.fields is not None and orjson.loads(entry.fields[b"task"])["task_id"] == "t1"
    assert (await answer(keys, TIERS, "nope", "1", b"{}", ())).status == "missing"
    await _submit(backend, "t2")
    refused = await answer(keys, TIERS, "t2", "", b"{}", ())
    assert (refused.status, refused.state) == ("not_waiting", "queued")


async def test_a_due_wait_wakes_once_and_a_late_reply_changes_nothing(backend: Backend) -> None:
    await _parked(backend, "t1", due_ms=now_ms() - 1)
    keys = backend.ref().keys
    promoted = await backend.bus.promote_due(keys, TIERS)
    assert (promoted.moved, promoted.waits) == (0, ("t1",))
    assert (await backend.bus.wake(keys, TIERS, "t1", ())).status == "ok"
    assert (await backend.bus.wake(keys, TIERS, "t1", ())).status == "gone"  # a second pump
    assert await backend.bus.ask_record(keys, "t1", "1") == (None, 1)
    assert await backend.bus.asked(keys, "t1") == {}
    late = await backend.bus.answer(keys, TIERS, "t1", "1", b"{}", ())
    assert late.status == "not_waiting"
    assert len(await _take(backend, "c1", 10)) == 1  # resumed once


async def test_a_reply_first_leaves_the_timeout_nothing_to_wake(backend: Backend) -> None:
    await _parked(backend, "t1", due_ms=now_ms() - 1)
    keys = backend.ref().keys
    assert (await backend.bus.answer(keys, TIERS, "t1", "1", b"{}", ())).status == "ok"
    assert (await backend.bus.promote_due(keys, TIERS)).waits == ()
    assert (await backend.bus.wake(keys, TIERS, "t1", ())).status == "gone"
    assert await backend.bus.ask_record(keys, "t1", "1") == (b"{}", 0)
    assert len(await _take(backend, "c1", 10)) == 1


async def _tenant_parked(b: Backend, task_id: str, tenant: str) -> None:
    task = {"task_id": task_id, "intent": "echo", "payload": {}, "tenant": tenant}
    task_json = orjson.dumps(task)
    entry_id = await _submit(b, task_id, task_json)
    await _take(b, "c1")
    assert await _begin(b, "c1", entry_id, task_id, fresh=True) == "ok"
    park = dataclasses.replace(_park(entry_id, task_id, now_ms() + 60_000), task_json=task_json)
    assert await b.bus.park(b.ref(), AGENT, "c1", park) == "ok"


async def test_a_tenant_lists_its_own_waiting_tasks_whatever_others_wait(
    backend: Backend,
) -> None:
    keys = backend.ref().keys
    for i in range(5):
        await _tenant_parked(backend, f"a{i}", "acme")
    await _tenant_parked(backend, "b0", "globex")

    def ids(found: list[Waiting]) -> list[str]:
        return [w.task_id for w in found]

    # The oldest question is acme's; globex's own listing does not go through acme's.
    assert ids(await backend.bus.waiting(keys, 1, "globex")) == ["b0"]
    assert ids(await backend.bus.waiting(keys, 2, "acme")) == ["a0", "a1"]
    assert ids(await backend.bus.waiting(keys, 1)) == ["a0"]
    assert len(await backend.bus.waiting(keys, 10)) == 6
    # A task answered, or cancelled, leaves its tenant's listing at once.
    assert (await backend.bus.answer(keys, TIERS, "a0", "1", b"{}", ())).status == "ok"
    assert await backend.bus.cancel(keys, "a1", b'{"cancelled":1}', ()) == "ok"
    assert ids(await backend.bus.waiting(keys, 2, "acme")) == ["a2", "a3"]
    assert ids(await backend.bus.waiting(keys, 10, "nobody")) == []


async def _pages(
    b: Backend, size: int, tenant: str | None, *, newest: bool = False
) -> list[list[str]]:
    """Every page of a waiting listing, each starting after the last of the one before."""
    keys, after, pages = b.ref().keys, None, []
    while page := await b.bus.waiting_ids(keys, size, tenant, after=after, newest=newest):
        pages.append([task_id for task_id, _ in page])
        after = WaitingCursor(int(page[-1][1]), page[-1][0])
    return pages


async def test_a_waiting_listing_pages_after_a_cursor_either_way_listing_each_once(
    backend: Backend,
) -> None:
    keys = backend.ref().keys
    for i in range(5):  # parked within a few ms: equal asked-at times, ordered by task id
        await _tenant_parked(backend, f"a{i}", "acme")
    await _tenant_parked(backend, "b0", "globex")
    assert (await backend.bus.answer(keys, TIERS, "a2", "1", b"{}", ())).status == "ok"
    assert await backend.bus.waiting_count([keys], "acme") == [5]  # a2's member is left
    assert await _pages(backend, 2, "acme") == [["a0", "a1"], ["a3", "a4"]]
    assert await backend.bus.waiting_count([keys], "acme") == [4]  # the listing dropped it
    assert await _pages(backend, 2, "acme", newest=True) == [["a4", "a3"], ["a1", "a0"]]
    assert await _pages(backend, 3, None, newest=True) == [["b0", "a4", "a3"], ["a1", "a0"]]
    assert await backend.bus.waiting_count([keys], "globex") == [1]


async def test_a_waiting_task_can_be_cancelled(backend: Backend) -> None:
    await _parked(backend, "t1", due_ms=now_ms() - 1)
    keys = backend.ref().keys
    assert await backend.bus.cancel(keys, "t1", b'{"cancelled":1}', ()) == "ok"
    assert await backend.tasks.terminal_result(AGENT, 0, "t1") == b'{"cancelled":1}'
    assert await backend.bus.waiting(keys, 10) == []
    assert await backend.bus.asked(keys, "t1") == {}
    assert (await backend.bus.promote_due(keys, TIERS)).waits == ()
    assert (await backend.bus.wake(keys, TIERS, "t1", ())).status == "gone"
    late = await backend.bus.answer(keys, TIERS, "t1", "1", b"{}", ())
    assert (late.status, late.state) == ("not_waiting", "done")
    assert await _take(backend, "c1", 10) == []


async def test_a_reply_resumes_a_canary_task_on_its_own_version_s_streams(
    backend: Backend,
) -> None:
    """Under a rollout a task parks from its version's streams; the reply (which finds the
    task by its location: agent, shard, tier) must resume it there, where its wait is."""
    canary = StreamRef(backend.keys.shard(AGENT, 0, "1.3.0"), "p2")
    unversioned = backend.ref()
    await backend.bus.ensure_group(canary, AGENT)
    await backend.bus.set_many([backend.tasks.location_record("t1", LOCATION)], 60, what="test")
    status, entry_id = await backend.bus.enqueue(
        canary, "t1", _task("t1"), reply="", max_backlog=100
    )
    assert status == "ok"
    await backend.bus.read(canary, AGENT, "c1", 1, None)
    await backend.bus.begin(canary, AGENT, "c1", [BeginItem(entry_id, "t1", 1)], fresh=True)
    park = _park(entry_id, "t1", now_ms() - 1)  # due already: no pump runs here
    assert await backend.bus.park(canary, AGENT, "c1", park) == "ok"
    assert (await backend.tasks.task_fields(LOCATION, "t1"))["parked_version"] == "1.3.0"

    replies = Replies(
        backend.bus,
        backend.tasks,
        backend.keys,
        events=event_sink(False),
        metrics=None,
        max_answer_bytes=999,
    )
    await replies.reply("t1", {"ok": True}, TIERS)
    assert await backend.bus.read(unversioned, AGENT, "c2", 10, None) == []
    (again,) = await backend.bus.read(canary, AGENT, "c2", 10, None)
    assert again.fields is not None and orjson.loads(again.fields[b"task"])["task_id"] == "t1"
    # Its wait left the canary's delayed set with the reply: nothing is left to wake.
    assert (await backend.bus.promote_due(canary.keys, TIERS)).waits == ()


async def _record(b: Backend, consumer: str, entry_id: str, task_id: str, **fields: bytes) -> str:
    item = StepRecord(entry_id, task_id, list(fields.items()))
    (status,) = await b.bus.record_steps(AGENT, consumer, [(b.ref(), item)])
    return status


async def test_only_the_entry_s_owner_records_steps_and_only_while_the_task_runs(
    backend: Backend,
) -> None:
    entry_id = await _submit(backend, "t1")
    await _take(backend, "c1")
    (first,) = await backend.bus.begin(
        backend.ref(), AGENT, "c1", [BeginItem(entry_id, "t1", 1)], fresh=True
    )
    assert (first.status, first.stepped) == ("ok", False)
    assert await _record(backend, "c1", entry_id, "t1", **{"step:a": b"1", "state": b"{}"}) == "ok"
    claimed = await backend.bus.claim_stale(backend.ref(), AGENT, "c2", 0, 10, RECLAIM_START)
    assert [e.entry_id for e in claimed.entries] == [entry_id]
    # The worker that lost the entry (paused, partitioned) writes nothing.
    assert await _record(backend, "c1", entry_id, "t1", **{"step:a": b"2", "x": b"1"}) == "lost"
    # The next delivery's begin says the task has records to read (the first one's did not).
    (begun,) = await backend.bus.begin(backend.ref(), AGENT, "c2", [BeginItem(entry_id, "t1", 1)])
    assert (begun.status, begun.deliveries, begun.stepped) == ("ok", 2, True)
    assert await _record(backend, "c2", entry_id, "t1", **{"step:b": b'"b"'}) == "ok"
    keys = backend.ref().keys
    assert await backend.bus.load_steps(keys, "t1") == {
        "step:a": b"1",
        "state": b"{}",
        "step:b": b'"b"',
    }
    assert await _commit(backend, "c2", entry_id, "t1", b"{}") == "ok"
    assert await _record(backend, "c2", entry_id, "t1", **{"step:c": b"3"}) == "lost"
    assert set(await backend.bus.load_steps(keys, "t1")) == {"step:a", "state", "step:b"}
    assert await backend.bus.load_steps(keys, "unknown") == {}
    # A terminal result (here a cancel between read and begin) stops the owner too.
    other = await _submit(backend, "t2")
    await _take(backend, "c1")
    assert await backend.bus.cancel(keys, "t2", b'{"cancelled":1}', ()) == "ok"
    assert await _record(backend, "c1", other, "t2", **{"step:a": b"1"}) == "dup"
    assert await backend.bus.load_steps(keys, "t2") == {}


async def test_a_batch_of_step_records_is_checked_record_by_record(backend: Backend) -> None:
    mine, theirs = await _submit(backend, "t1"), await _submit(backend, "t2")
    await _take(backend, "c1", 2)
    await backend.bus.claim_stale(
        backend.ref(), AGENT, "c2", 0, 1, ReclaimCursor(theirs)
    )  # takes t2 only
    batch = [
        (backend.ref(), StepRecord(mine, "t1", [("step:a", b"1")])),
        (backend.ref(), StepRecord(theirs, "t2", [("step:a", b"2")])),
        (backend.ref(), StepRecord(mine, "t1", [("step:b", b"3")])),
    ]
    assert await backend.bus.record_steps(AGENT, "c1", batch) == ["ok", "lost", "ok"]
    keys = backend.ref().keys
    assert await backend.bus.load_steps(keys, "t1") == {"step:a": b"1", "step:b": b"3"}
    assert await backend.bus.load_steps(keys, "t2") == {}


async def test_a_batch_writes_the_locations_of_the_tasks_it_enqueued_only(
    backend: Backend,
) -> None:
    """Each enqueued task's location record comes with its entry; a second copy of a task
    in the same batch is enqueued once. On one server (and in memory) a task already there
    or refused for backlog gets no location record."""
    await _submit(backend, "old")
    ref = backend.ref()
    ids = ["old", "new", "new", "full"]
    items = [Enqueue(ref, t, _task(t)) for t in ids]
    locations = [backend.tasks.location_record(t, LOCATION) for t in ids]
    replies = await backend.bus.enqueue_many(
        items, max_backlog=[100, 100, 100, 2], locations=locations, location_ttl_s=60
    )
    statuses = [status for status, _ in replies]
    assert statuses == ["exists", "ok", "exists", "overloaded"]
    assert replies[2][1] == replies[1][1]  # the copy names the entry of the first
    assert await backend.tasks.location("new") == LOCATION
    if not backend.cluster:  # a cluster writes them before the enqueue, all of them
        assert await backend.tasks.location("old") is None  # ``_submit`` wrote none
        assert await backend.tasks.location("full") is None
    assert (await backend.bus.stream_stats(ref, AGENT)).length == 2


async def _fair(
    b: Backend, tasks: list[tuple[str, str, float]], max_backlog: int = 100
) -> list[Admitted]:
    """Enqueue (task id, fairness key, weight) into the fair tier p2, in one call."""
    return await b.bus.enqueue_many(
        [Enqueue(b.ref(), task_id, _task(task_id)) for task_id, _, _ in tasks],
        max_backlog=max_backlog,
        fair=[Fairness(key, weight) for _, key, weight in tasks],
    )


async def _read_fair(b: Backend, count: int) -> list[str]:
    entries = await b.bus.read_fair(b.ref(), AGENT, "c1", count, None)
    return [orjson.loads((e.fields or {})[b"task"])["task_id"] for e in entries]


async def _capped(b: Backend, tasks: list[tuple[str, str]], cap: int) -> list[Admitted]:
    """Enqueue (task id, fairness key) into p2 as a tier with ``max_running_per_key``."""
    return await b.bus.enqueue_many(
        [Enqueue(b.ref(), task_id, _task(task_id)) for task_id, _ in tasks],
        max_backlog=100,
        fair=[Fairness(key, 1.0, cap) for _, key in tasks],
    )


async def _read_capped(
    b: Backend, count: int, cap: int, consumer: str = "c1"
) -> dict[str, RawEntry]:
    entries = await b.bus.read_fair(b.ref(), AGENT, consumer, count, None, cap=cap)
    return {orjson.loads((e.fields or {})[b"task"])["task_id"]: e for e in entries}


async def _run_to_end(b: Backend, consumer: str, task_id: str, entry: RawEntry) -> None:
    assert await _begin(b, consumer, entry.entry_id, task_id, fresh=True) == "ok"
    assert await _commit(b, consumer, entry.entry_id, task_id, b"{}") == "ok"


@pytest.mark.parametrize("cap", [0, 5])
async def test_a_fair_read_after_the_server_lost_its_scripts_moves_and_reads_at_once(
    backend: Backend, cap: int
) -> None:
    """The release and its read go in one transaction; a server without the script (a
    restart, SCRIPT FLUSH) still has the fair queue's tasks moved in and read in that call."""
    tasks = [("t1", "a"), ("t2", "a"), ("t3", "b")]
    admitted = await backend.bus.enqueue_many(
        [Enqueue(backend.ref(), task_id, _task(task_id)) for task_id, _ in tasks],
        max_backlog=100,
        fair=[Fairness(key, 1.0, cap) for _, key in tasks],
    )
    # The first went straight into the idle stream, the others wait in the fair queue.
    assert [bool(a.entry_id) for a in admitted] == [True, False, False]
    if isinstance(backend.bus, RedisStreamBus):
        await backend.bus.client.execute_command(
            "SCRIPT FLUSH", **({"target_nodes": RedisCluster.ALL_NODES} if backend.cluster else {})
        )
    entries = await backend.bus.read_fair(backend.ref(), AGENT, "c1", 10, None, cap=cap)
    assert sorted(orjson.loads((e.fields or {})[b"task"])["task_id"] for e in entries) == [
        "t1",
        "t2",
        "t3",
    ]
    assert await backend.bus.read_fair(backend.ref(), AGENT, "c1", 10, None, cap=cap) == []


async def test_a_fair_task_into_an_idle_stream_goes_straight_in(backend: Backend) -> None:
    ((status, entry_id),) = await _fair(backend, [("t1", "a", 1.0)])
    assert status == "ok" and entry_id  # a reader blocked on the stream wakes
    assert await _state(backend, "t1") == "queued"
    # The stream now holds something unread: the next one waits in the fair queue.
    ((status, entry_id),) = await _fair(backend, [("t2", "a", 1.0)])
    assert (status, entry_id) == ("ok", "")
    assert await _state(backend, "t2") == "queued"
    assert await _read_fair(backend, 10) == ["t1", "t2"]
    assert await _read_fair(backend, 10) == []


async def test_a_fair_tier_serves_every_key_before_a_flood_goes_on(backend: Backend) -> None:
    flood = [(f"a{i}", "A", 1.0) for i in range(20)]
    await _fair(backend, flood)
    await _fair(backend, [(f"{key}{i}", key, 1.0) for key in "BC" for i in range(3)])
    started = [task_id for _ in range(10) for task_id in await _read_fair(backend, 1)]
    # a0 went straight in; then A, B and C in turn (ties in any order), so three of A's.
    assert sorted(started) == sorted(
        ["a0", "a1", "a2", "a3", *[f"{k}{i}" for k in "BC" for i in range(3)]]
    )
    rest = [task_id for _ in range(10) for task_id in await _read_fair(backend, 5)]
    assert sorted(rest) == sorted(f"a{i}" for i in range(4, 20))


async def test_a_fair_tier_serves_keys_in_proportion_to_their_weights(backend: Backend) -> None:
    await _fair(backend, [("x", "X", 1.0)])  # straight in: the others all wait their turn
    await _fair(backend, [(f"a{i}", "A", 3.0) for i in range(30)])
    await _fair(backend, [(f"b{i}", "B", 1.0) for i in range(30)])
    assert await _read_fair(backend, 1) == ["x"]
    started = [task_id for _ in range(4) for task_id in await _read_fair(backend, 4)]
    assert sum(t.startswith("a") for t in started) == 12
    assert sum(t.startswith("b") for t in started) == 4


async def test_a_key_partly_released_keeps_its_place_behind_its_queued_tasks(
    backend: Backend,
) -> None:
    """The release forgets a key's last finish time only once its last queued task has
    left: a task of a key still queued comes after that key's queued tasks."""
    await _fair(backend, [("x", "X", 1.0)])  # straight in: the others all wait their turn
    await _fair(backend, [(f"{key}{i}", key, 1.0) for key in "ab" for i in range(4)])
    assert await _read_fair(backend, 1) == ["x"]
    assert sorted(await _read_fair(backend, 2)) == ["a0", "b0"]
    await _fair(backend, [("a4", "a", 1.0)])
    rest = [task_id for _ in range(8) for task_id in await _read_fair(backend, 1)]
    assert [t for t in rest if t.startswith("a")] == ["a1", "a2", "a3", "a4"]
    assert rest[-1] == "a4"  # its turn is after b's last, which finishes with a3


async def test_a_task_cancelled_in_the_fair_queue_never_begins(backend: Backend) -> None:
    await _fair(backend, [("t1", "a", 1.0), ("t2", "a", 1.0)])
    keys = backend.ref().keys
    assert await backend.bus.cancel(keys, "t2", b'{"cancelled":1}', ()) == "ok"
    entries = await backend.bus.read_fair(backend.ref(), AGENT, "c1", 10, None)
    assert [e.entry_id != "" for e in entries] == [True, True]
    assert await _begin(backend, "c1", entries[1].entry_id, "t2", fresh=True) == "dup"
    assert await _begin(backend, "c1", entries[0].entry_id, "t1", fresh=True) == "ok"


async def test_a_fair_queue_counts_against_its_tier_s_backlog(backend: Backend) -> None:
    replies = await _fair(backend, [(f"t{i}", "a", 1.0) for i in range(4)], max_backlog=3)
    assert [status for status, _ in replies] == ["ok", "ok", "ok", "overloaded"]
    assert await _state(backend, "t3") is None


async def test_a_fair_read_blocks_until_a_task_comes(backend: Backend) -> None:
    reading = asyncio.ensure_future(backend.bus.read_fair(backend.ref(), AGENT, "c1", 5, 30_000))
    await asyncio.sleep(0)
    await _fair(backend, [("t1", "a", 1.0)])
    (entry,) = await asyncio.wait_for(reading, timeout=30)
    assert orjson.loads((entry.fields or {})[b"task"])["task_id"] == "t1"


async def test_a_fair_read_of_a_stream_without_its_group_says_so_and_loses_nothing(
    backend: Backend,
) -> None:
    ref = backend.ref("p1")  # no group: as after Redis lost its data
    await backend.bus.enqueue_many(
        [Enqueue(ref, t, _task(t)) for t in ("t1", "t2")],
        max_backlog=100,
        fair=[Fairness("a"), Fairness("a")],
    )
    with pytest.raises(GroupVanished):
        await backend.bus.read_fair(ref, AGENT, "c1", 10, None)
    await backend.bus.ensure_group(ref, AGENT)  # what the worker does then
    entries = await backend.bus.read_fair(ref, AGENT, "c1", 10, None)
    assert sorted(orjson.loads((e.fields or {})[b"task"])["task_id"] for e in entries) == [
        "t1",
        "t2",
    ]


async def test_a_key_at_its_cap_gets_no_more_in_until_one_of_its_tasks_ends(
    backend: Backend,
) -> None:
    await _capped(backend, [(f"a{i}", "A") for i in range(6)], cap=2)
    await _capped(backend, [(f"b{i}", "B") for i in range(3)], cap=2)
    first = await _read_capped(backend, 10, cap=2)
    # a0 went straight in; A's second slot took a1; B, below its cap, went on.
    assert sorted(first) == ["a0", "a1", "b0", "b1"]
    assert (await backend.bus.stream_stats(backend.ref(), AGENT)).fair == 5  # a2-a5, b2
    # a0 begun and running, a1 read: nothing more of A; B's last once b0 ends.
    assert await _begin(backend, "c1", first["a0"].entry_id, "a0", fresh=True) == "ok"
    await _run_to_end(backend, "c1", "b0", first["b0"])
    assert sorted(await _read_capped(backend, 10, cap=2)) == ["b2"]
    # A commit frees one slot; a park (a parked task holds none) another: a2 and a3, in turn.
    assert await _commit(backend, "c1", first["a0"].entry_id, "a0", b"{}") == "ok"
    assert await _begin(backend, "c1", first["a1"].entry_id, "a1", fresh=True) == "ok"
    park = _park(first["a1"].entry_id, "a1", now_ms() + 60_000)
    assert await backend.bus.park(backend.ref(), AGENT, "c1", park) == "ok"
    again = await _read_capped(backend, 10, cap=2)
    assert sorted(again) == ["a2", "a3"]
    assert (await backend.bus.stream_stats(backend.ref(), AGENT)).fair == 2


async def test_a_capped_key_s_slots_of_a_dead_consumer_free_when_their_tasks_end(
    backend: Backend,
) -> None:
    """Counted from the PEL, not a counter: a consumer that dies holding a key's tasks
    leaves them pending (they hold their slots until a reclaim runs them to their end)."""
    await _capped(backend, [(f"a{i}", "A") for i in range(4)], cap=2)
    taken = await _read_capped(backend, 10, cap=2, consumer="dead")
    assert sorted(taken) == ["a0", "a1"]
    assert await _read_capped(backend, 10, cap=2, consumer="c2") == {}
    claimed = await backend.bus.claim_stale(backend.ref(), AGENT, "c2", 0, 10, RECLAIM_START)
    assert len(claimed.entries) == 2
    assert await _read_capped(backend, 10, cap=2, consumer="c2") == {}  # still running
    for entry in claimed.entries:
        task_id = orjson.loads((entry.fields or {})[b"task"])["task_id"]
        assert await _begin(backend, "c2", entry.entry_id, task_id, fresh=False) == "ok"
        assert await _commit(backend, "c2", entry.entry_id, task_id, b"{}") == "ok"
    assert sorted(await _read_capped(backend, 10, cap=2, consumer="c2")) == ["a2", "a3"]


async def test_a_capped_key_s_task_into_an_idle_stream_waits_if_its_key_is_at_the_cap(
    backend: Backend,
) -> None:
    ((_, entry_id),) = await _capped(backend, [("a0", "A")], cap=1)
    assert entry_id  # straight in, and counted
    taken = await _read_capped(backend, 10, cap=1)
    assert list(taken) == ["a0"]
    # Nothing unread and the fair queue empty, but A's one slot is held: a1 waits.
    ((_, entry_id),) = await _capped(backend, [("a1", "A")], cap=1)
    assert entry_id == ""
    ((_, entry_id),) = await _capped(backend, [("b0", "B")], cap=1)
    assert entry_id == ""  # behind a1 in the fair queue, as any task then
    assert list(await _read_capped(backend, 10, cap=1)) == ["b0"]
    # A blocked read takes the slot soon after it frees: no entry is added to wake it.
    reading = asyncio.ensure_future(
        backend.bus.read_fair(backend.ref(), AGENT, "c1", 10, 30_000, cap=1)
    )
    # One turn of the loop: the read sends its release first and finds A at its cap (had
    # it come after a0's end, it would take a1 at once: the same answer, a shorter path).
    await asyncio.sleep(0)
    await _run_to_end(backend, "c1", "a0", taken["a0"])
    (entry,) = await asyncio.wait_for(reading, timeout=10)
    assert orjson.loads((entry.fields or {})[b"task"])["task_id"] == "a1"


async def test_tasks_held_at_a_cap_go_in_first_once_the_cap_is_gone(backend: Backend) -> None:
    await _capped(backend, [(f"a{i}", "A") for i in range(4)], cap=1)
    assert list(await _read_capped(backend, 10, cap=1)) == ["a0"]  # a1-a3 held
    await _fair(backend, [("b0", "B", 1.0), ("b1", "B", 1.0)])  # b0 straight in
    # The tier's cap removed (a new config): the held tasks, then the fair queue's.
    assert await _read_fair(backend, 3) == ["b0", "a1", "a2"]
    assert await _read_fair(backend, 10) == ["a3", "b1"]
