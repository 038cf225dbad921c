"""Operator views over the streams: per-stream status and the dead-letter streams."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import orjson
from pydantic import ValidationError

from deepagents.compose import RedisClient, services_for
from deepagents.config.schema import FileConfig
from deepagents.config.settings import Settings
from deepagents.contract.task import Task
from deepagents.errors import DeepAgentsError, ErrorCode, InvalidPayload
from deepagents.orchestrator.routing import agent_specs
from deepagents.store.base import TaskRecords
from deepagents.store.tasks import DeadLetterEntry
from deepagents.transport.base import MessageBus, StreamRef
from deepagents.transport.keys import ShardKeys


class DeadLetterNotFound(DeepAgentsError):
    """No dead letter with that id."""

    code = ErrorCode.NOT_FOUND


class Admin:
    def __init__(self, bus: MessageBus, tasks: TaskRecords, config: FileConfig) -> None:
        self.config = config
        self.keys = tasks.keys
        self.bus = bus
        self.tasks = tasks
        self.agents = sorted(agent_specs(config))

    @classmethod
    def from_client(cls, client: RedisClient, config: FileConfig, settings: Settings) -> Admin:
        """Views over a client the caller opened and closes."""
        services = services_for(client, settings)
        return cls(services.bus, services.tasks, config)

    def shards(self, agent: str | None = None) -> list[tuple[str, ShardKeys]]:
        names = [agent] if agent else self.agents
        return [
            (name, self.keys.shard(name, s))
            for name in names
            for s in range(self.config.agent_settings(name).shards)
        ]

    async def status(self, agent: str | None = None) -> list[dict[str, Any]]:
        """One row per tier stream; an agent under a rollout has its configured versions'
        streams too (``delayed`` then counts every version's delayed set of the shard)."""
        rows = []
        for name, keys in self.shards(agent):
            version_keys = [keys, *(keys.of_version(v) for v in self._versions(name))]
            dlq, delayed = await self.bus.shard_backlog(keys)
            for shard_keys in version_keys[1:]:
                delayed += (await self.bus.shard_backlog(shard_keys))[1]
            for shard_keys in version_keys:
                for tier in self.config.tier_names:
                    stats = await self.bus.stream_stats(StreamRef(shard_keys, tier), name)
                    row = asdict(stats)
                    row.update(
                        agent=name, shard=keys.shard, tier=tier, dead_letters=dlq, delayed=delayed
                    )
                    if shard_keys.version:
                        row["version"] = shard_keys.version
                    rows.append(row)
        return rows

    def _versions(self, agent: str) -> tuple[str, ...]:
        rollout = self.config.rollouts.get(agent)
        return () if rollout is None else tuple(v for v in (rollout.stable, rollout.canary) if v)

    async def list_dead(self, agent: str | None = None, limit: int = 100) -> list[DeadLetterEntry]:
        out: list[DeadLetterEntry] = []
        for name, keys in self.shards(agent):
            out += await self.tasks.dead_letters(name, keys, limit)
        out.sort(key=lambda e: e.entry_id)
        return out[:limit]

    async def find_dead(self, entry_id: str, agent: str | None = None) -> DeadLetterEntry:
        for name, keys in self.shards(agent):
            found = await self.tasks.dead_letter(name, keys, entry_id)
            if found is not None:
                return found
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
            removed += await self.tasks.purge_dead(keys, entry_ids)
        return removed
