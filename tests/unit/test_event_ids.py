"""Audit event ids are valid, distinct UUIDv7s ordered with the clock to a fraction of a
millisecond, in creation order within one process, and across processes of one host."""

from __future__ import annotations

import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from deepagents._internal import ids
from deepagents._internal.ids import uuid7_str


def test_ids_are_distinct_uuid7() -> None:
    seen: set[str] = set()
    for _ in range(4000):
        text = uuid7_str()
        value = uuid.UUID(text)
        assert str(value) == text
        assert value.version == 7
        assert value.variant == uuid.RFC_4122
        seen.add(text)
    assert len(seen) == 4000


def test_ids_carry_the_millisecond_clock() -> None:
    before = time.time_ns() // 1_000_000
    value = uuid.UUID(uuid7_str())
    after = time.time_ns() // 1_000_000
    # The first 48 bits are the Unix time in ms.
    assert before <= value.int >> 80 <= after


def test_ids_of_one_process_sort_in_creation_order() -> None:
    """Within a millisecond the counter orders them; 10,000 cross several of its blocks."""
    ids = [uuid7_str() for _ in range(10_000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_a_forked_child_never_repeats_its_parents_ids() -> None:
    """A child must not go on with its copy of the parent's random bits and counter."""
    uuid7_str()  # the parent holds a started block of counter values now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: send ten ids and leave at once
        os.write(write, ",".join(uuid7_str() for _ in range(10)).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as pipe:
        child = pipe.read().split(",")
    parent = [uuid7_str() for _ in range(10)]
    # compare the random parts alone: the two may share a millisecond or not
    assert len(child) == 10
    assert not {c[-21:] for c in child} & {p[-21:] for p in parent}


def test_threads_drawing_at_once_get_distinct_ids() -> None:
    with ThreadPoolExecutor(8) as pool:
        batches = list(pool.map(lambda _: [uuid7_str() for _ in range(2000)], range(8)))
    ids = [i for batch in batches for i in batch]
    assert len(set(ids)) == len(ids) == 16_000


def _child_id(after: str | None) -> tuple[str, str]:
    """An id made in a forked child after the parent made ``after`` (or, with None, one the
    parent makes after reading the child's): (the child's, the parent's)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write, uuid7_str().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as pipe:
        child = pipe.read()
    return child, after if after is not None else uuid7_str()


def test_ids_made_one_after_the_other_in_two_processes_sort_in_that_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A task's ``submitted`` event is made by the submitter, its ``started`` by a worker,
    within the same millisecond on a fast machine: the millisecond alone ordered the two by
    each process's random bits (the task's event stream gave ``started`` first). The clock
    here runs 100 times slower from the start of a millisecond, so every id of the test
    shares its millisecond with the one before it, as on a fast machine, yet follows real
    time."""
    start = time.time_ns()
    base = (start // 1_000_000 + 1) * 1_000_000
    slow = SimpleNamespace(time_ns=lambda: base + (time.time_ns() - start) // 100)
    monkeypatch.setattr(ids, "time", slow)
    pairs = []
    for _ in range(10):
        before = uuid7_str()
        pairs.append((before, _child_id(before)[0]))
        pairs.append(_child_id(None))
    same_ms = [(a, b) for a, b in pairs if uuid.UUID(a).int >> 80 == uuid.UUID(b).int >> 80]
    assert len(same_ms) >= len(pairs) // 2  # else the test shows the millisecond only
    assert all(a < b for a, b in pairs)
