"""Agents for the tests. LabAgent records every execution in Redis so tests can count runs."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

from redis.asyncio import Redis

from deepagents import AgentContract, InvalidInput, Result
from deepagents.transport.redis_streams import connect


class LabAgent(AgentContract):
    """Payload directives: sleep (s, async), fail (always raise), fail_until_fixed (raise until
    the key <prefix>:fixed exists), invalid (raise InvalidInput), crash (the process exits
    at once)."""

    name = "lab"
    version = "1.0.0"
    intents = ("lab",)

    def __init__(self, client: Redis | None = None, prefix: str | None = None) -> None:
        self._client = client
        self.prefix = prefix or os.environ.get("DEEPAGENTS_PREFIX", "da")

    @property
    def client(self) -> Redis:
        if self._client is None:
            cluster = os.environ.get("DEEPAGENTS_REDIS_CLUSTER") == "true"
            self._client = connect(os.environ["DEEPAGENTS_REDIS_URL"], cluster=cluster)
        return self._client

    async def execute(self, context: dict[str, Any]) -> Result:
        task, payload = context["task"], context["payload"]
        pipe = self.client.pipeline(transaction=False)
        pipe.incr(f"{self.prefix}:exec:{task.task_id}")
        pipe.rpush(f"{self.prefix}:runs", f"{task.task_id}|{os.getpid()}")
        await pipe.execute()
        if payload.get("crash"):
            os._exit(137)  # dies mid-task, as a segfault or the OOM killer would end it
        if payload.get("sleep"):
            # LAB_SLEEP_CAP lets a restarted worker finish long tasks quickly in tests.
            cap = float(os.environ.get("LAB_SLEEP_CAP", "inf"))
            await asyncio.sleep(min(float(payload["sleep"]), cap))
        if payload.get("invalid"):
            raise InvalidInput("the payload asked to be invalid")
        if payload.get("fail"):
            raise RuntimeError("this task always fails")
        if payload.get("fail_until_fixed") and not await self.client.exists(f"{self.prefix}:fixed"):
            raise RuntimeError("poison: fails until fixed")
        return Result(output={"pid": os.getpid(), "n": payload.get("n")})


class BlockingAgent(AgentContract):
    """All-sync agent; ``block`` in the payload blocks its thread with time.sleep, ``hold``
    until ``release`` is set (in-process tests: an end the test chooses, not a duration)."""

    name = "blocking"
    version = "1.0.0"
    intents = ("block",)

    def __init__(self, release: threading.Event | None = None) -> None:
        self.release = release or threading.Event()

    def execute(self, context: dict[str, Any]) -> Result:
        seconds = float(context["payload"].get("block", 0))
        if seconds:
            time.sleep(seconds)
        if context["payload"].get("hold") and not self.release.wait(120):
            raise RuntimeError("held for 120 s and never released")
        return Result(output={"finished": time.monotonic()})


class StartsAgent(AgentContract):
    """Does nothing; ``started`` lists each task's fairness key (else its tenant) in the
    order their executions began (in-process tests of dispatch order)."""

    name = "starts"
    version = "1.0.0"
    intents = ("start",)

    def __init__(self) -> None:
        self.started: list[str] = []

    async def execute(self, context: dict[str, Any]) -> Result:
        task = context["task"]
        self.started.append(task.fairness_key or task.tenant or "")
        return Result(output=None)
