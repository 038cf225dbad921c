"""The bus's operations for a parent waiting on its child tasks (DESIGN.md, "Delegation"),
on every backend: the park is owner-checked, a child's end is recorded once, the parent is
woken once (when the last awaited child ends, or any for a fan-out with a limit), an end
that came before the park is not missed, a due wait is swept rather than woken, and a
cancel takes the wait out."""

from __future__ import annotations

from deepagents.transport.base import ChildEnded, ChildWait, ParkStatus, WaitMode, now_ms
from tests.contract.conftest import AGENT, Backend
from tests.contract.test_bus_contract import LOCATION, _begin, _state, _submit, _take, _task
from tests.support.wait import eventually

TIERS = ["p0", "p2"]


def _wait(
    entry_id: str,
    awaiting: tuple[str, ...],
    mode: WaitMode = WaitMode.ALL,
    sweep_ms: int = 60_000,
    deadline_ms: int = 0,
) -> ChildWait:
    return ChildWait(
        entry_id=entry_id,
        task_id="parent",
        task_json=_task("parent"),
        tier="p2",
        mode=mode,
        children=awaiting,
        awaiting=awaiting,
        sweep_ms=sweep_ms,
        deadline_ms=deadline_ms,
    )


async def _running(b: Backend) -> str:
    entry_id = await _submit(b, "parent")
    await _take(b, "c1")
    assert await _begin(b, "c1", entry_id, "parent", fresh=True) == "ok"
    return entry_id


async def _parked(b: Backend, wait: ChildWait) -> ParkStatus:
    assert await b.bus.park_children(b.ref(), AGENT, "c2", wait) == ParkStatus.LOST
    return await b.bus.park_children(b.ref(), AGENT, "c1", wait)


async def _end(b: Backend, child: str, result: bytes = b'{"ok":1}') -> ChildEnded:
    return await b.bus.child_ended(b.ref().keys, TIERS, "parent", child, result, ())


async def test_the_last_child_s_end_wakes_its_waiting_parent_once(backend: Backend) -> None:
    entry_id = await _running(backend)
    assert await _parked(backend, _wait(entry_id, ("a", "b"))) == ParkStatus.OK
    assert await _state(backend, "parent") == "waiting"
    stats = await backend.bus.stream_stats(backend.ref(), AGENT)
    assert (stats.length, stats.pending) == (0, 0)  # no entry, no slot
    assert await _end(backend, "a") == ChildEnded.RECORDED
    assert await _end(backend, "a", b'{"again":1}') == ChildEnded.DUP
    assert await _state(backend, "parent") == "waiting"
    assert await _end(backend, "b") == ChildEnded.WOKE
    assert await _end(backend, "b") == ChildEnded.DUP
    assert await _state(backend, "parent") == "queued"
    (entry,) = await _take(backend, "c1", 10)  # re-enqueued once
    assert entry.fields is not None and entry.fields[b"task"] == _task("parent")
    keys = backend.ref().keys
    assert await backend.bus.child_results(keys, "parent", ["a", "b", "c"]) == {
        "a": b'{"ok":1}',
        "b": b'{"ok":1}',
    }
    assert (await backend.bus.promote_due(keys, TIERS)).waits == ()  # its wait is gone


async def test_an_end_before_the_park_is_not_missed(backend: Backend) -> None:
    entry_id = await _running(backend)
    assert await _end(backend, "a") == ChildEnded.RECORDED  # the parent is running
    assert await _parked(backend, _wait(entry_id, ("a",))) == ParkStatus.READY
    assert await _state(backend, "parent") == "queued"
    assert len(await _take(backend, "c1", 10)) == 1


async def test_with_any_the_first_end_of_those_awaited_wakes_the_parent(
    backend: Backend,
) -> None:
    entry_id = await _running(backend)
    assert await _parked(backend, _wait(entry_id, ("a", "b"), WaitMode.ANY)) == ParkStatus.OK
    assert await _end(backend, "x") == ChildEnded.RECORDED  # not one it awaits
    assert await _state(backend, "parent") == "waiting"
    assert await _end(backend, "b") == ChildEnded.WOKE
    assert await _end(backend, "a") == ChildEnded.RECORDED  # queued now: recorded only
    assert len(await _take(backend, "c1", 10)) == 1


async def test_a_due_wait_is_swept_not_woken_until_its_deadline(backend: Backend) -> None:
    entry_id = await _running(backend)
    assert await _parked(backend, _wait(entry_id, ("a", "b"), sweep_ms=20)) == ParkStatus.OK
    keys = backend.ref().keys
    for _ in range(2):  # due every sweep interval, and swept each time
        await eventually(lambda: _due(backend), timeout=10, what="the wait came due")
        woken = await backend.bus.wake(keys, TIERS, "parent", ())
        assert (woken.status, woken.children) == ("sweep", ("a", "b"))
        assert await _state(backend, "parent") == "waiting"
    assert await _take(backend, "c1", 10) == []


async def _due(b: Backend) -> bool:
    return (await b.bus.promote_due(b.ref().keys, TIERS)).waits == ("parent",)


async def test_a_wait_past_the_parent_s_deadline_re_enqueues_it(backend: Backend) -> None:
    entry_id = await _running(backend)
    wait = _wait(entry_id, ("a",), deadline_ms=now_ms() - 1)
    assert await _parked(backend, wait) == ParkStatus.OK
    keys = backend.ref().keys
    assert (await backend.bus.promote_due(keys, TIERS)).waits == ("parent",)
    assert (await backend.bus.wake(keys, TIERS, "parent", ())).status == "ok"
    assert await _state(backend, "parent") == "queued"
    (entry,) = await _take(backend, "c1", 10)
    assert entry.fields is not None and entry.fields[b"task"] == _task("parent")


async def test_a_cancelled_parent_takes_no_end_and_wakes_no_more(backend: Backend) -> None:
    entry_id = await _running(backend)
    assert await _parked(backend, _wait(entry_id, ("a", "b"))) == ParkStatus.OK
    keys = backend.ref().keys
    assert await backend.bus.cancel(keys, "parent", b'{"cancelled":1}', ()) == "ok"
    assert await backend.tasks.terminal_result(AGENT, 0, "parent") == b'{"cancelled":1}'
    fields = await backend.tasks.task_fields(LOCATION, "parent")
    assert fields["children"] == "a b" and "awaiting" not in fields
    assert await _end(backend, "a") == ChildEnded.ENDED
    assert (await backend.bus.promote_due(keys, TIERS)).waits == ()
    assert await _take(backend, "c1", 10) == []
    assert await _end(backend, "a") == ChildEnded.ENDED
    assert await backend.bus.child_ended(keys, TIERS, "nope", "a", b"{}", ()) == "missing"


async def test_a_running_task_is_cancelled_only_when_asked_to(backend: Backend) -> None:
    await _running(backend)
    keys = backend.ref().keys
    assert await backend.bus.cancel(keys, "parent", b"{}", ()) == "running"
    assert await backend.bus.cancel(keys, "parent", b'{"c":1}', (), running=True) == "ok"
    assert await backend.bus.cancel(keys, "parent", b"{}", (), running=True) == "done"
    assert await backend.tasks.terminal_result(AGENT, 0, "parent") == b'{"c":1}'


async def test_a_child_is_linked_to_its_parent_while_it_exists(backend: Backend) -> None:
    await _submit(backend, "kid")
    keys = backend.ref().keys
    assert await backend.bus.link_child(keys, "kid", "parent", 1) is True
    fields = await backend.tasks.task_fields(LOCATION, "kid")
    assert (fields["parent_id"], fields["depth"]) == ("parent", "1")
    assert await backend.bus.link_child(keys, "gone", "parent", 1) is False
