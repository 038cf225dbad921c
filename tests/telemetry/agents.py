"""Agents for the telemetry tests."""

from __future__ import annotations

from typing import Any

from deepagents import AgentContract, Result


class MoodyAgent(AgentContract):
    """Healthy until told otherwise (``healthy`` attribute); ``raise_health`` makes the
    check itself fail."""

    name = "moody"
    version = "1.0.0"
    intents = ("moody",)

    def __init__(self) -> None:
        self.healthy = True
        self.raise_health = False

    async def execute(self, context: dict[str, Any]) -> Result:
        return Result(output={"ok": True})

    async def health_check(self) -> bool:
        if self.raise_health:
            raise RuntimeError("health probe crashed")
        return self.healthy
