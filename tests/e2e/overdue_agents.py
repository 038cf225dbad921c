"""Agents for the overdue tests: each sleeps ``payload.sleep`` seconds, so that the next
task of its tier (a pool of one) waits past ``max_wait_ms``."""

from __future__ import annotations

import asyncio
from typing import Any

from deepagents import AgentContract, Result, Task


class NapAgent(AgentContract):
    """Declares no degraded path: degrade moves its overdue task to the next tier."""

    name = "nap"
    version = "1.0.0"
    intents = ("nap",)

    async def execute(self, context: dict[str, Any]) -> Result:
        payload = context["payload"]
        await asyncio.sleep(float(payload.get("sleep", 0)))
        return Result(output={"n": payload.get("n"), "path": "execute"})


class DegradableNapAgent(NapAgent):
    """Declares ``degraded_execute``: a cheap answer that never sleeps."""

    name = "nap_degradable"
    intents = ("nap_degradable",)

    def degraded_execute(self, context: dict[str, Any]) -> Result:
        return Result(output={"n": context["payload"].get("n"), "path": "degraded_execute"})


class CachingNapAgent(NapAgent):
    """Declares ``cache_key``: the payload's ``key``; degrade answers from the last good
    answer for it."""

    name = "nap_caching"
    intents = ("nap_caching",)

    def cache_key(self, task: Task) -> str | None:
        key = task.payload.get("key")
        return key if isinstance(key, str) else None
