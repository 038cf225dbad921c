"""Park a task straight through a Redis bus (enqueue, read, begin, park), for the tests of
the scripts that handle waiting tasks."""

from __future__ import annotations

import orjson

from deepagents.transport.base import BeginItem, Park, StreamRef, now_ms
from deepagents.transport.redis_streams.bus import RedisStreamBus


async def parked(
    bus: RedisStreamBus,
    ref: StreamRef,
    task_id: str,
    *,
    tenant: str | None = None,
    due_ms: int | None = None,
) -> None:
    """``task_id`` enqueued on ``ref`` and parked by consumer c1 of group echo, asking
    "ok?"; its wait is due at ``due_ms`` (default: now)."""
    task: dict[str, object] = {"task_id": task_id, "intent": "echo", "payload": {}}
    if tenant is not None:
        task["tenant"] = tenant
    task_json = orjson.dumps(task)
    await bus.enqueue(ref, task_id, task_json, reply="", max_backlog=100)
    (entry,) = await bus.read(ref, "echo", "c1", 1, None)
    await bus.begin(ref, "echo", "c1", [BeginItem(entry.entry_id, task_id, 1)], fresh=True)
    due = now_ms() if due_ms is None else due_ms
    park = Park(entry.entry_id, task_id, task_json, "p2", "1", "ok?", b"{}", "fail", b"", due)
    assert await bus.park(ref, "echo", "c1", park) == "ok"
