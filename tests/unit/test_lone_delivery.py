"""A lone task under light load: once begun, its handler starts before its reader sends the
next read (which would block on the drained stream). The order is what is tested here; how
much time that saves is measured in ``loadtests/bench_peers.py --only latency``."""

from __future__ import annotations

from typing import Any

from deepagents import AgentContract, Result, Task
from deepagents.testing import AgentHarness
from deepagents.transport.base import RawEntry, StreamRef

EVENTS: list[str] = []


class Recorded(AgentContract):
    name = "recorded"
    version = "1.0.0"
    intents = ("recorded",)

    async def can_handle(self, task: Task) -> bool:
        EVENTS.append("handler")
        return True

    async def execute(self, context: dict[str, Any]) -> Result:
        return Result(output={})


async def test_a_lone_task_starts_before_its_reader_reads_again() -> None:
    EVENTS.clear()
    harness = AgentHarness(Recorded)
    bus: Any = harness.services.bus
    read = bus.read

    async def recorded_read(ref: StreamRef, *args: Any) -> list[RawEntry]:
        EVENTS.append(f"read {ref.name}")
        entries: list[RawEntry] = await read(ref, *args)
        if entries:
            EVENTS.append(f"{len(entries)} from {ref.name}")
        return entries

    bus.read = recorded_read  # before the worker starts: its readers block in this one
    async with harness as h:
        result = await h.run(Task(intent="recorded", payload={}))
    assert result.status.value == "success"
    (got,) = [e for e in EVENTS if e.startswith("1 from ")]
    stream = got.removeprefix("1 from ")
    after = [e for e in EVENTS[EVENTS.index(got) + 1 :] if e in ("handler", f"read {stream}")]
    assert after[:2] == ["handler", f"read {stream}"], EVENTS
