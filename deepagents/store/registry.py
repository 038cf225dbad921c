"""The agent registry in Redis: which agent types run, their versions, intents and instances."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import orjson
from redis.asyncio import Redis

from deepagents.contract.agent import AgentContract
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams.errors import redis_errors


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
        await self.client.hset(
            self.keys.agent_instances(agent.name), instance, int(time.time() * 1000)
        )

    async def deregister(self, agent: AgentContract, instance: str) -> None:
        # Best effort on the way out: a stale instance entry ages out by its timestamp.
        with contextlib.suppress(Exception):
            await self.client.hdel(self.keys.agent_instances(agent.name), instance)

    async def agents(self) -> dict[str, dict[str, object]]:
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
