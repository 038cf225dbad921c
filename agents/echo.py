"""EchoAgent: answers with its payload. For tests and benchmarks of the runtime itself."""

from __future__ import annotations

from typing import Any

from deepagents import AgentContract, Result


class EchoAgent(AgentContract):
    name = "echo"
    version = "1.0.0"
    intents = ("echo",)

    async def execute(self, context: dict[str, Any]) -> Result:
        return Result(output=context["payload"])
