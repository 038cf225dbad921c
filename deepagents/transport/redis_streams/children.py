"""The Redis bus's operations for parents waiting on child tasks: park, a child's end, and
the reads of recorded child results. Each change is one script on the parent's shard slot
(``lua/park_children.lua``, ``child_ended.lua``); every key it touches is in its KEYS."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from deepagents.contract.events import AuditEvent
from deepagents.transport.base import ChildEnded, ChildWait, ParkStatus, StreamRef, now_ms
from deepagents.transport.keys import ShardKeys
from deepagents.transport.outbox import encode_events
from deepagents.transport.redis_streams.errors import redis_errors
from deepagents.transport.redis_streams.scripts import Scripts


def _s(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else value


class RedisChildren:
    """Mixed into ``RedisStreamBus`` (its ``client`` and ``scripts``)."""

    client: Any
    scripts: Scripts

    async def park_children(
        self, stream: StreamRef, group: str, consumer: str, item: ChildWait
    ) -> ParkStatus:
        keys = stream.keys
        with redis_errors(f"park on {stream.name}"):
            status = await self.scripts.park_children(
                keys=[
                    stream.name,
                    keys.task(item.task_id),
                    keys.steps(item.task_id),
                    keys.delayed,
                    keys.outbox,
                    keys.stream(item.tier),
                ],
                args=[
                    group,
                    consumer,
                    item.entry_id,
                    item.task_id,
                    item.task_json,
                    item.tier,
                    item.mode.value,
                    now_ms(),
                    item.sweep_ms,
                    item.deadline_ms,
                    encode_events(item.events),
                    keys.version,
                    " ".join(item.children),
                    " ".join(item.awaiting),
                ],
            )
        return ParkStatus(_s(status))

    async def child_ended(
        self,
        keys: ShardKeys,
        tiers: Sequence[str],
        parent_id: str,
        child_id: str,
        result_json: bytes,
        events: Sequence[AuditEvent],
    ) -> ChildEnded:
        with redis_errors("record a child's end"):
            status = await self.scripts.child_ended(
                keys=[
                    keys.task(parent_id),
                    keys.steps(parent_id),
                    keys.delayed,
                    keys.outbox,
                    *(keys.stream(t) for t in tiers),
                ],
                args=[parent_id, child_id, result_json, now_ms(), encode_events(events), *tiers],
            )
        return ChildEnded(_s(status))

    async def child_results(
        self, keys: ShardKeys, task_id: str, child_ids: Sequence[str]
    ) -> dict[str, bytes]:
        if not child_ids:
            return {}
        with redis_errors("read child results"):
            values = await self.client.hmget(keys.steps(task_id), [f"child:{c}" for c in child_ids])
        return {c: v for c, v in zip(child_ids, values, strict=True) if v is not None}

    async def link_child(self, keys: ShardKeys, child_id: str, parent_id: str, depth: int) -> bool:
        with redis_errors("link a child task"):
            linked = await self.scripts.link_child(
                keys=[keys.task(child_id)], args=[parent_id, depth]
            )
        return bool(linked)
