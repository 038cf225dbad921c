"""Per-task pieces of the worker's hot path, timed alone: best of 25 rounds of 20,000 calls.

    .venv/bin/python loadtests/bench_hot_path.py

Prints µs per call for: ``Result(output=...)``, ``decode_envelope`` of an echo entry, a dict
lookup by ``StreamRef``, ``uuid7_str``, and the audit events of one task as the worker
builds them (the ``started`` event and the terminal one). To compare two commits, run it
from a ``git worktree`` of each; a tree from before session 9 builds both events at commit,
which this script follows.
"""

from __future__ import annotations

import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's package

import orjson

from deepagents._internal.ids import uuid7_str
from deepagents.contract import Result, Task
from deepagents.contract.task import utcnow
from deepagents.transport.base import StreamRef
from deepagents.transport.entries import decode_envelope
from deepagents.transport.keys import Keys
from deepagents.transport.outbox import encode_events, open_started
from deepagents.worker.encode import Encoder
from deepagents.worker.flight import InFlight


def best_us(fn: Callable[[], Any]) -> float:
    return min(timeit.repeat(fn, number=20_000, repeat=25)) / 20_000 * 1e6


def echo_fields() -> dict[bytes, bytes]:
    """A stream entry of an echo task, as the worker reads it."""
    task = Task(intent="echo", payload={"i": 1})
    return {
        b"task": orjson.dumps(task.model_dump(mode="json", exclude_none=True)),
        b"attempt": b"1",
        b"enq": b"1700000000000",
        b"reply": b"",
    }


class _Agent:  # what the event builders read of the agent
    name = "echo"
    version = "1.0.0"


def events_of_one_task() -> Callable[[], Any]:
    encoder = Encoder(_Agent(), "host-1234")  # type: ignore[arg-type]
    fields = echo_fields()
    envelope = decode_envelope(fields)
    ref = StreamRef(Keys("bench").shard("echo", 0), "p2")
    flight = InFlight(ref, "1-1", envelope, 1)
    result, now = b'{"task_id":"x","status":"success","output":{"i":1}}', utcnow()

    def both() -> Any:
        flight.context = encoder.context(ref, envelope)
        started = encoder.started_event("x", flight.context, now, 3)
        return (
            open_started(started),
            encode_events(encoder.commit_events(flight, "succeeded", result, [], now)),
        )

    return both


def main() -> None:
    fields = echo_fields()
    ref = StreamRef(Keys("bench").shard("echo", 0), "p2")
    by_ref = {ref: 1}
    for name, fn in (
        ("Result(output=...)", lambda: Result(output={"i": 1})),
        ("decode_envelope", lambda: decode_envelope(fields)),
        ("dict lookup by StreamRef", lambda: by_ref[ref]),
        ("uuid7_str", uuid7_str),
        ("audit events of one task", events_of_one_task()),
    ):
        print(f"{name:28s} {best_us(fn):6.2f} µs")


if __name__ == "__main__":
    main()
