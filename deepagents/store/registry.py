"""The agent registry in Redis: which agent types run, their versions, intents and instances."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

import orjson
from redis.asyncio import Redis

from deepagents.contract.agent import AgentContract
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams.errors import redis_errors

# An instance whose heartbeat is older than this is dropped from the registry by readers of
# health: a worker killed with -9 never deregisters.
FORGET_MS = 600_000


@dataclass(frozen=True, slots=True)
class AgentHealth:
    """One agent type as its instances last reported: fresh = heartbeat within ``stale_ms``;
    healthy = fresh and its last ``health_check()`` passed."""

    agent: str
    instances: int
    fresh: int
    healthy: int

    @property
    def ratio(self) -> float:
        return self.healthy / self.instances if self.instances else 0.0

    @property
    def ok(self) -> bool:
        return self.healthy > 0


class AgentRegistry:
    def __init__(self, client: Redis, keys: Keys) -> None:
        self.client: Any = client  # replies are bytes (decode_responses=False)
        self.keys = keys

    async def register(self, agent: AgentContract, instance: str) -> None:
        now = int(time.time() * 1000)
        with redis_errors("register agent"):
            pipe = self.client.pipeline(transaction=False)
            pipe.hset(
                self.keys.agent(agent.name),
                mapping={
                    "version": agent.version,
                    "intents": orjson.dumps(list(agent.intents)),
                    "updated_ms": now,
                },
            )
            pipe.sadd(self.keys.agents_index, agent.name)
            pipe.hset(self.keys.agent_instances(agent.name), instance, now)
            await pipe.execute()

    async def beat(self, agent: AgentContract, instance: str) -> None:
        with redis_errors("heartbeat"):
            await self.client.hset(
                self.keys.agent_instances(agent.name), instance, int(time.time() * 1000)
            )

    async def deregister(self, agent: AgentContract, instance: str) -> None:
        # Best effort on the way out: a stale instance entry ages out by its timestamp.
        with contextlib.suppress(Exception):
            pipe = self.client.pipeline(transaction=False)
            pipe.hdel(self.keys.agent_instances(agent.name), instance)
            pipe.hdel(self._health_key(agent.name), instance)
            await pipe.execute()

    def _health_key(self, name: str) -> str:
        return f"{self.keys.agent(name)}:health"

    async def record_health(self, agent: str, instance: str, ok: bool) -> None:
        """The result of one ``health_check()`` of one instance: ``"1|<ms>"`` or ``"0|<ms>"``."""
        value = f"{1 if ok else 0}|{int(time.time() * 1000)}"
        with redis_errors("record agent health"):
            await self.client.hset(self._health_key(agent), instance, value)

    async def health(
        self, names: list[str] | None = None, *, stale_ms: int, forget_ms: int = FORGET_MS
    ) -> dict[str, AgentHealth]:
        """Health per agent type (all registered ones when ``names`` is None). Instances
        silent for longer than ``forget_ms`` are removed on the way."""
        with redis_errors("read agent health"):
            if names is None:
                names = sorted(
                    n.decode() for n in await self.client.smembers(self.keys.agents_index)
                )
            pipe = self.client.pipeline(transaction=False)
            for name in names:
                pipe.hgetall(self.keys.agent_instances(name))
                pipe.hgetall(self._health_key(name))
            replies = await pipe.execute()
        now = int(time.time() * 1000)
        out: dict[str, AgentHealth] = {}
        for i, name in enumerate(names):
            beats = {k.decode(): int(v) for k, v in replies[2 * i].items()}
            checks = {k.decode(): v.decode() for k, v in replies[2 * i + 1].items()}
            gone = [inst for inst, ms in beats.items() if now - ms > forget_ms]
            if gone:
                await self._forget(name, gone)
            live = {inst: ms for inst, ms in beats.items() if inst not in gone}
            fresh = [inst for inst, ms in live.items() if now - ms <= stale_ms]
            healthy = [inst for inst in fresh if checks.get(inst, "0").startswith("1|")]
            out[name] = AgentHealth(name, len(live), len(fresh), len(healthy))
        return out

    async def _forget(self, name: str, instances: list[str]) -> None:
        with redis_errors("forget agent instances"):
            pipe = self.client.pipeline(transaction=False)
            pipe.hdel(self.keys.agent_instances(name), *instances)
            pipe.hdel(self._health_key(name), *instances)
            await pipe.execute()

    async def agents(self, *, what: str = "list agents") -> dict[str, dict[str, object]]:
        with redis_errors(what):
            return await self._agents()

    async def _agents(self) -> dict[str, dict[str, object]]:
        names = sorted(n.decode() for n in await self.client.smembers(self.keys.agents_index))
        out: dict[str, dict[str, object]] = {}
        for name in names:
            info = await self.client.hgetall(self.keys.agent(name))
            instances = await self.client.hgetall(self.keys.agent_instances(name))
            out[name] = {
                "version": info.get(b"version", b"").decode(),
                "intents": orjson.loads(info.get(b"intents", b"[]")),
                "instances": {k.decode(): int(v) for k, v in instances.items()},
            }
        return out
