"""The bus's remaining operations, on every backend: a restart's read of its own pending
entries, commits of several streams in one call, a dead letter's replay, pruning the
consumers that are gone, the reply channel, and the views (outbox backlog, idle pending
entries, the server's check and round trip)."""

from __future__ import annotations

import asyncio

import orjson

from deepagents.contract.events import AuditEvent
from deepagents.transport.base import (
    RECLAIM_START,
    BeginItem,
    CommitItem,
    DeadLetter,
    StreamRef,
)
from deepagents.transport.states import Outcome, Replayed, TaskState
from tests.contract.conftest import AGENT, Backend
from tests.contract.test_bus_contract import TIERS, _begin, _parked, _state, _submit, _take, _task
from tests.support.wait import eventually


async def test_a_restart_reads_its_own_pending_entries_from_where_it_left_off(
    backend: Backend,
) -> None:
    ids = [await _submit(backend, f"t{n}") for n in range(4)]
    await _take(backend, "c1", 3)
    await _take(backend, "c2", 1)
    ref = backend.ref()
    mine = await backend.bus.read_own_pending(ref, AGENT, "c1", 10, "0")
    assert [e.entry_id for e in mine] == ids[:3]  # not c2's
    assert all(e.fields is not None and e.fields[b"attempt"] == b"1" for e in mine)
    page = await backend.bus.read_own_pending(ref, AGENT, "c1", 1, ids[0])
    assert [e.entry_id for e in page] == [ids[1]]
    assert await backend.bus.read_own_pending(ref, AGENT, "c1", 10, ids[2]) == []
    # Still its own: the restarted consumer begins and commits them as any.
    assert await _begin(backend, "c1", ids[0], "t0", fresh=False) == "ok"
    (done,) = await backend.bus.commit(ref, AGENT, "c1", [CommitItem(ids[0], "t0", b"{}")])
    assert done == Outcome.OK
    left = await backend.bus.read_own_pending(ref, AGENT, "c1", 10, "0")
    assert [e.entry_id for e in left] == ids[1:3]


async def test_commits_of_several_streams_go_in_one_call_each_checked_on_its_own(
    backend: Backend,
) -> None:
    urgent, normal = backend.ref("p0"), backend.ref("p2")
    fast = await _enqueued(backend, urgent, "u1")
    slow = [await _submit(backend, f"t{n}") for n in range(2)]
    await backend.bus.read(urgent, AGENT, "c1", 10, None)
    await _take(backend, "c1", 2)
    await backend.bus.begin(urgent, AGENT, "c1", [BeginItem(fast, "u1", 1)], fresh=True)
    await backend.bus.begin(
        normal, AGENT, "c1", [BeginItem(e, f"t{n}", 1) for n, e in enumerate(slow)], fresh=True
    )
    # c2 reclaims one of them first: that commit alone is lost.
    await backend.bus.claim_stale(normal, AGENT, "c2", 0, 1, RECLAIM_START)
    batches = [
        (urgent, [CommitItem(fast, "u1", b'{"u":1}')]),
        (normal, [CommitItem(e, f"t{n}", b'{"n":1}') for n, e in enumerate(slow)]),
    ]
    assert await backend.bus.commit_streams(AGENT, "c1", batches) == [["ok"], ["lost", "ok"]]
    assert await backend.tasks.terminal_result(AGENT, 0, "u1") == b'{"u":1}'
    assert await backend.tasks.terminal_result(AGENT, 0, "t0") is None
    assert await backend.tasks.terminal_result(AGENT, 0, "t1") == b'{"n":1}'
    assert await backend.bus.commit_streams(AGENT, "c1", batches[:1]) == [["ok"]]  # again


async def _enqueued(b: Backend, ref: StreamRef, task_id: str) -> str:
    status, entry_id = await b.bus.enqueue(ref, task_id, _task(task_id), reply="", max_backlog=100)
    assert status == "ok"
    return entry_id


async def test_a_replayed_dead_letter_is_queued_afresh_once(backend: Backend) -> None:
    entry_id = await _submit(backend, "t1")
    await _take(backend, "c1")
    assert await _begin(backend, "c1", entry_id, "t1", fresh=True) == "ok"
    letter = DeadLetter(entry_id, "max_deliveries", "1 delivery", "t1", b'{"dead":1}')
    assert await backend.bus.dead_letter(backend.ref(), AGENT, "c1", letter) == "ok"
    keys = backend.ref().keys
    (dead,) = await backend.tasks.dead_letters(AGENT, keys, 10)
    status, again = await backend.bus.replay(keys, dead.entry_id, "p2", "t1", _task("t1"), "")
    assert status == Replayed.OK and again
    assert await _state(backend, "t1") == TaskState.QUEUED
    assert await backend.tasks.terminal_result(AGENT, 0, "t1") is None
    assert await backend.bus.deliveries(backend.ref(), ["t1"]) == [0]
    assert await backend.tasks.dead_letters(AGENT, keys, 10) == []
    assert await backend.bus.replay(keys, dead.entry_id, "p2", "t1", _task("t1"), "") == (
        Replayed.MISSING,
        "",
    )
    (entry,) = await _take(backend, "c2")
    assert entry.entry_id == again and entry.fields is not None
    assert orjson.loads(entry.fields[b"task"])["task_id"] == "t1"
    assert entry.fields[b"attempt"] == b"1"
    assert await _begin(backend, "c2", again, "t1", fresh=True) == "ok"
    assert await backend.bus.deliveries(backend.ref(), ["t1"]) == [1]


async def test_only_consumers_that_hold_nothing_are_pruned_never_the_caller(
    backend: Backend,
) -> None:
    ids = [await _submit(backend, f"t{n}") for n in range(3)]
    ref = backend.ref()
    await _take(backend, "holds", 1)
    for n, consumer in ((1, "done"), (2, "self")):  # each ran a task to its end
        await _take(backend, consumer, 1)
        await _begin(backend, consumer, ids[n], f"t{n}", fresh=True)
        await backend.bus.commit(ref, AGENT, consumer, [CommitItem(ids[n], f"t{n}", b"{}")])
    await _take(backend, "nothing", 1)  # found nothing: not a consumer of the group
    assert (await backend.bus.stream_stats(ref, AGENT)).consumers == 3
    assert await backend.bus.prune_consumers(ref, AGENT, "self", 60_000) == []  # none so idle
    assert await backend.bus.prune_consumers(ref, AGENT, "self", 0) == ["done"]
    assert await backend.bus.prune_consumers(ref, AGENT, "self", 0) == []
    assert (await backend.bus.stream_stats(ref, AGENT)).consumers == 2
    # The one that holds an entry keeps it, and its owner's commit lands.
    (done,) = await backend.bus.commit(ref, AGENT, "holds", [CommitItem(ids[0], "t0", b"{}")])
    assert done == "ok"


async def test_a_commit_notifies_its_submitter_s_reply_channel(backend: Backend) -> None:
    got: list[bytes] = []
    listener = backend.bus.reply_listener(f"{backend.keys.prefix}:reply:o1", got.append)
    await listener.open()
    running = asyncio.create_task(listener.run())
    try:
        status, entry_id = await backend.bus.enqueue(
            backend.ref(),
            "t1",
            _task("t1"),
            reply=listener.channel,
            max_backlog=100,
        )
        assert status == "ok"
        await _take(backend, "c1")
        assert await _begin(backend, "c1", entry_id, "t1", fresh=True) == "ok"
        item = CommitItem(entry_id, "t1", b'{"r":1}', reply=listener.channel)
        assert await backend.bus.commit(backend.ref(), AGENT, "c1", [item]) == ["ok"]

        async def delivered() -> list[bytes]:
            return got

        assert await eventually(delivered, timeout=10) == [b'{"r":1}']
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await listener.aclose()


async def test_the_outbox_holds_one_entry_per_step_that_wrote_events(backend: Backend) -> None:
    """Each step's events as the audit store reads them: the objects handed to the bus,
    the started one with the delivery count the begin counted, the same on every backend."""
    keys = backend.ref().keys
    assert await backend.bus.outbox_lengths([keys]) == [0]
    awkward = 'quote " backslash \\ nul \x00 é 𝄞'
    submitted = AuditEvent.of("submitted", "t1", agent=AGENT, payload={"text": awkward})
    status, entry_id = await backend.bus.enqueue(
        backend.ref(), "t1", _task("t1"), reply="", max_backlog=100, events=[submitted]
    )
    assert status == "ok"
    assert await backend.bus.outbox_lengths([keys]) == [1]
    await _take(backend, "c1")
    started = AuditEvent.of("started", "t1", agent=AGENT, queue_ms=3)
    (begun,) = await backend.bus.begin(
        backend.ref(), AGENT, "c1", [BeginItem(entry_id, "t1", 1, started)], fresh=True
    )
    assert begun.status == "ok"
    model_call = AuditEvent.of("model_call", "t1", model=awkward)
    result = orjson.Fragment(b'{"status":"success"}')  # a result, encoded already
    finished = AuditEvent.of("succeeded", "t1", result=result, deliveries=1)
    item = CommitItem(entry_id, "t1", b"{}", events=[model_call, finished])
    assert await backend.bus.commit(backend.ref(), AGENT, "c1", [item]) == ["ok"]
    other = backend.keys.shard(AGENT, 1)
    assert await backend.bus.outbox_lengths([keys, other]) == [3, 0]
    assert backend.outbox is not None
    written = [orjson.loads(events) for events in await backend.outbox(keys)]

    def read(event: AuditEvent, **more: object) -> dict[str, object]:
        as_read: dict[str, object] = orjson.loads(orjson.dumps(event.as_object()))
        return {**as_read, **more}

    assert written == [
        [read(submitted)],
        [read(started, deliveries=1)],
        [read(model_call), read(finished, result={"status": "success"})],
    ]


async def test_the_views_of_idle_pending_entries_and_of_the_server(backend: Backend) -> None:
    ref = backend.ref()
    await _submit(backend, "t1")
    empty = backend.ref("p0")
    streams = [(ref.name, AGENT), (empty.name, AGENT), (ref.name, "nobody")]
    assert await backend.bus.oldest_idle_ms(streams, 10) == [None, None, None]
    await _take(backend, "c1")
    idle, none_, missing = await backend.bus.oldest_idle_ms(streams, 10)
    assert idle is not None and idle >= 0
    assert (none_, missing) == (None, None)
    assert await backend.bus.check_server()  # a server it can run on, named
    rtt = await backend.bus.ping_ms()
    assert rtt is not None and rtt >= 0


async def test_a_listing_reads_the_waiting_ids_first_then_the_questions_of_those_kept(
    backend: Backend,
) -> None:
    for task_id in ("t1", "t2"):
        await _parked(backend, task_id)
    keys = backend.ref().keys
    ids = await backend.bus.waiting_ids(keys, 10)
    assert [task_id for task_id, _ in ids] == ["t1", "t2"]
    assert ids[0][1] <= ids[1][1]  # oldest first, by when they asked
    assert await backend.bus.waiting_ids(keys, 1) == ids[:1]
    assert await backend.bus.waiting_ids(keys, 10, "nobody") == []
    assert await backend.bus.waiting_of(keys, ids) == await backend.bus.waiting(keys, 10)
    # A task answered meanwhile is left out of the questions read.
    assert (await backend.bus.answer(keys, TIERS, "t1", "1", b"{}", ())).status == "ok"
    assert [w.task_id for w in await backend.bus.waiting_of(keys, ids)] == ["t2"]
