"""A task's states, and what the transport's operations answer, as enums.

The Lua scripts write and compare the same state strings: ``tests/unit/test_task_states.py``
reads every state a script names and holds it to ``TaskState``, so the two cannot drift.
Each enum is a ``StrEnum``: a member equals its string, as stored in the task hash and as
a script answers it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar


class TaskState(StrEnum):
    """The ``state`` field of a task's hash."""

    QUEUED = "queued"  # an entry in its tier stream, not begun yet
    SCHEDULED = "scheduled"  # submitted for later: in the delayed set until due
    RUNNING = "running"  # begun by a consumer, which holds its entry
    RETRYING = "retrying"  # in the delayed set until its backoff has passed
    WAITING = "waiting"  # parked for a person's reply or for its child tasks
    DONE = "done"  # answered: a result (a cancel's too) is stored
    DEAD = "dead"  # dead-lettered, with its result


TERMINAL = frozenset({TaskState.DONE, TaskState.DEAD})


class Outcome(StrEnum):
    """What an owner-checked operation on one entry did (begin, commit, reschedule,
    dead letter, park, record steps)."""

    OK = "ok"  # done, or (a commit sent again) already done by this consumer
    DUP = "dup"  # the task has a result already: nothing written, its entry acked
    LOST = "lost"  # another consumer owns the entry now (reclaimed): nothing written
    GONE = "gone"  # the entry is no longer pending (acked, or its stream trimmed)


class Enqueued(StrEnum):
    """What an enqueue did with one task."""

    OK = "ok"
    EXISTS = "exists"  # a task with this id exists: nothing enqueued (idempotent on id)
    OVERLOADED = "overloaded"  # its stream is at its backlog limit: refused


class Cancelled(StrEnum):
    """What a cancel did; a task in a state it cannot cancel answers that ``TaskState``."""

    OK = "ok"
    MISSING = "missing"  # no such task (never submitted, or its record expired)


class Replayed(StrEnum):
    OK = "ok"
    MISSING = "missing"  # no such dead letter (replayed already, or trimmed)


class AnswerStatus(StrEnum):
    """What a reply to a waiting task's question did."""

    OK = "ok"  # stored, and the task re-enqueued
    MISSING = "missing"  # no such task
    NOT_WAITING = "not_waiting"  # the task waits for nothing (or for another question)
    ALREADY_REPLIED = "already_replied"  # this question has its answer


class WakeStatus(StrEnum):
    """What waking a due wait did."""

    OK = "ok"  # timed out: re-enqueued
    GONE = "gone"  # a reply or a cancel took the wait out first
    STALE = "stale"  # the task is not waiting
    SWEEP = "sweep"  # a wait for child tasks: check the children it awaits; it moved on


E = TypeVar("E", bound=StrEnum)


def decoder(enum: type[E]) -> dict[bytes | str, E]:
    """A script's reply (bytes from Redis, str in memory) to its member, by a dict
    look-up: calling the enum by value costs several times more, per task."""
    table: dict[bytes | str, E] = {}
    for member in enum:
        table[member.value] = member
        table[member.value.encode()] = member
    return table
