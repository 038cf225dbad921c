"""Operator views over the streams: per-stream status and the dead-letter streams."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import orjson
from pydantic import ValidationError
from redis.asyncio import Redis

from deepagents.config.schema import FileConfig
from deepagents.contract.task import Task
from deepagents.errors import DeepAgentsError, ErrorCode, InvalidPayload
from deepagents.orchestrator.routing import agent_specs
from deepagents.transport.base import StreamRef
from deepagents.transport.keys import Keys, ShardKeys
from deepagents.transport.redis_streams.bus import RedisStreamBus
from deepagents.transport.redis_streams.errors import redis_errors


class DeadLetterNotFound(DeepAgentsError):
    """No dead letter with that id."""

    code = ErrorCode.NOT_FOUND


@dataclass(frozen=True, slots=True)
class DeadLetterEntry:
    agent: str
    shard: int
    entry_id: str
    reason: str
    error: str
    deliveries: int
    dead_ms: int
    source: str
    task_id: str | None
    task_json: str | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _s(value: bytes | None) -> str:
    return value.decode(errors="replace") if value else ""


def _entry(agent: str, shard: int, entry_id: bytes, fields: dict[bytes, bytes]) -> DeadLetterEntry:
    raw = fields.get(b"orig_task")
    task_id = None
    if raw:
        try:
            task_id = str(orjson.loads(raw).get("task_id")) or None
        except (orjson.JSONDecodeError, AttributeError):
            task_id = None
    return DeadLetterEntry(
        agent=agent,
        shard=shard,
        entry_id=entry_id.decode(),
        reason=_s(fields.get(b"reason")),
        error=_s(fields.get(b"error")),
        deliveries=int(fields.get(b"deliveries") or 0),
        dead_ms=int(fields.get(b"dead_ms") or 0),
        source=_s(fields.get(b"source")),
        task_id=task_id,
        task_json=_s(raw) or None,
    )


class Admin:
    def __init__(self, client: Redis, config: FileConfig, prefix: str) -> None:
        self.client: Any = client  # replies are bytes (decode_responses=False)
        self.config = config
        self.keys = Keys(prefix)
        self.bus = RedisStreamBus(client)
        self.agents = sorted(agent_specs(config))

    def shards(self, agent: str | None = None) -> list[tuple[str, ShardKeys]]:
        names = [agent] if agent else self.agents
        return [
            (name, self.keys.shard(name, s))
            for name in names
            for s in range(self.config.agent_settings(name).shards)
        ]

    async def status(self, agent: str | None = None) -> list[dict[str, Any]]:
        rows = []
        for name, keys in self.shards(agent):
            with redis_errors("status"):
                dlq = await self.client.xlen(keys.dlq)
                delayed = await self.client.zcard(keys.delayed)
            for tier in self.config.tier_names:
                stats = await self.bus.stream_stats(StreamRef(keys, tier), name)
                row = asdict(stats)
                row.update(
                    agent=name, shard=keys.shard, tier=tier, dead_letters=dlq, delayed=delayed
                )
                rows.append(row)
        return rows

    async def list_dead(self, agent: str | None = None, limit: int = 100) -> list[DeadLetterEntry]:
        out: list[DeadLetterEntry] = []
        for name, keys in self.shards(agent):
            with redis_errors("read dead letters"):
                entries = await self.client.xrange(keys.dlq, count=limit)
            out += [_entry(name, keys.shard, eid, fields) for eid, fields in entries]
        out.sort(key=lambda e: e.entry_id)
        return out[:limit]

    async def find_dead(self, entry_id: str, agent: str | None = None) -> DeadLetterEntry:
        for name, keys in self.shards(agent):
            with redis_errors("read dead letters"):
                found = await self.client.xrange(keys.dlq, entry_id, entry_id)
            if found:
                eid, fields = found[0]
                return _entry(name, keys.shard, eid, fields)
        raise DeadLetterNotFound(
            f"no dead letter {entry_id!r}" + (f" for agent {agent}" if agent else "")
        )

    async def replay(
        self,
        entry_id: str,
        *,
        agent: str | None = None,
        payload: dict[str, Any] | None = None,
        task_json: str | None = None,
    ) -> tuple[DeadLetterEntry, str]:
        """Put a dead letter back on its tier stream (optionally fixed); returns its new id."""
        dead = await self.find_dead(entry_id, agent)
        text = task_json or dead.task_json
        if not text:
            raise InvalidPayload(
                f"dead letter {entry_id} holds no task; pass --task with a fixed one"
            )
        try:
            task = Task.model_validate(orjson.loads(text))
        except (orjson.JSONDecodeError, ValidationError) as exc:
            raise InvalidPayload(
                f"the task of {entry_id} is not valid ({exc}); pass --task"
            ) from exc
        if payload is not None:
            task = task.model_copy(update={"payload": payload})
        tier = dead.source.rsplit(":", 1)[-1] if dead.source else self.config.fallback_tier
        if tier not in self.config.tiers:
            tier = self.config.fallback_tier
        keys = self.keys.shard(dead.agent, dead.shard)
        body = orjson.dumps(task.model_dump(mode="json", exclude_none=True))
        status, new_id = await self.bus.replay(keys, entry_id, tier, task.task_id, body, "")
        if status != "ok":
            raise DeadLetterNotFound(f"dead letter {entry_id} vanished while replaying")
        return dead, new_id

    async def purge(self, agent: str | None = None, entry_ids: list[str] | None = None) -> int:
        removed = 0
        for _, keys in self.shards(agent):
            with redis_errors("purge dead letters"):
                if entry_ids:
                    removed += int(await self.client.xdel(keys.dlq, *entry_ids))
                else:
                    removed += int(await self.client.xlen(keys.dlq))
                    await self.client.delete(keys.dlq)
        return removed
