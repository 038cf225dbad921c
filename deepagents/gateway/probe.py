"""The probe agent behind ``GET /health?full=true``.

A deployment runs it like any agent (``deepagents worker deepagents.gateway.probe:ProbeAgent``).
A probe task travels the same path as real work (gateway → Redis stream → worker →
result → reply channel), so a green full health check means a task can get through.
The agent stamps when it ran, so the gateway can split the latency into hops.
"""

from __future__ import annotations

import time
from typing import Any

from deepagents.contract.agent import AgentContract
from deepagents.contract.result import Result

PROBE_INTENT = "deepagents.probe"


class ProbeAgent(AgentContract):
    name = "probe"
    version = "1.0.0"
    intents = (PROBE_INTENT,)

    async def execute(self, context: dict[str, Any]) -> Result:
        return Result(
            output={"ran_at_ms": time.time() * 1000, "nonce": context["payload"].get("nonce")}
        )
