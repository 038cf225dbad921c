"""Two versions of one agent type for the rollout tests: ``StableAgent`` (1.2.0) fails 1%
of its tasks, ``CanaryAgent`` (1.3.0) 30%, each chosen by a hash of the task id that is
independent of the routing's. Every run is recorded in Redis (``<prefix>:runs``:
``task_id|version``) when a Redis URL is known, so tests can count who ran what."""

from __future__ import annotations

import asyncio
import hashlib
import os
from typing import Any, ClassVar

from redis.asyncio import Redis

from deepagents import AgentContract, Result
from deepagents.contract.result import ErrorCode
from deepagents.transport.redis_streams import connect

NAME = "canaried"


def _share(task_id: str) -> float:
    digest = hashlib.blake2b(f"fail:{task_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class _Versioned(AgentContract):
    name = NAME
    intents = ("canaried",)
    fail_rate: ClassVar[float] = 0.0

    def __init__(self, client: Redis | None = None, prefix: str | None = None) -> None:
        self._client = client
        self.prefix = prefix or os.environ.get("DEEPAGENTS_PREFIX", "da")

    @property
    def client(self) -> Redis:
        if self._client is None:
            self._client = connect(os.environ["DEEPAGENTS_REDIS_URL"])
        return self._client

    async def execute(self, context: dict[str, Any]) -> Result:
        task = context["task"]
        await self.client.rpush(f"{self.prefix}:runs", f"{task.task_id}|{self.version}")
        sleep = float(os.environ.get("ROLLOUT_TEST_SLEEP", task.payload.get("sleep", 0)))
        if sleep:
            await asyncio.sleep(sleep)
        if _share(task.task_id) < self.fail_rate:
            return Result.failed(ErrorCode.AGENT_ERROR, f"{self.version} failed this one")
        return Result(output={"version": self.version})


class StableAgent(_Versioned):
    version = "1.2.0"
    fail_rate = 0.01


class CanaryAgent(_Versioned):
    version = "1.3.0"
    fail_rate = 0.30


class HealthyCanaryAgent(_Versioned):
    version = "1.3.0"
    fail_rate = 0.01
