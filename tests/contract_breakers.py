"""Agents that break the four-method contract, each in one way, and count their runs: a
broken contract is a bug, so each must run exactly once before its task is dead-lettered."""

from __future__ import annotations

from collections import Counter
from typing import Any

from deepagents import AgentContract, Result

SECRET = "s3cr3t-payload-value"  # sent in every payload: no log line may show it
RUNS: Counter[str] = Counter()


class Opaque:
    """Not JSON, and nothing pydantic knows how to make JSON of."""

    def __repr__(self) -> str:
        return f"Opaque({SECRET})"


class ReturnsDict(AgentContract):
    name = "returns_dict"
    version = "1.0.0"
    intents = ("returns_dict",)

    async def execute(self, context: dict[str, Any]) -> Result:
        RUNS[self.name] += 1
        return {"answer": context["payload"]}  # type: ignore[return-value]


class NotJson(AgentContract):
    name = "not_json"
    version = "1.0.0"
    intents = ("not_json",)

    async def execute(self, context: dict[str, Any]) -> Result:
        RUNS[self.name] += 1
        return Result(output={"echo": context["payload"], "handle": Opaque()})


class BadPostProcess(AgentContract):
    name = "bad_post_process"
    version = "1.0.0"
    intents = ("bad_post_process",)

    async def execute(self, context: dict[str, Any]) -> Result:
        RUNS[self.name] += 1
        return Result(output={"ok": True})

    async def post_process(self, result: Result) -> dict[str, Any] | Result:
        return ["not", "a", "result"]  # type: ignore[return-value]


class BadMetrics(AgentContract):
    name = "bad_metrics"
    version = "1.0.0"
    intents = ("bad_metrics",)

    async def execute(self, context: dict[str, Any]) -> Result:
        RUNS[self.name] += 1
        return Result(output={"ok": True})

    async def post_process(self, result: Result) -> dict[str, Any] | Result:
        return {"tokens_used": SECRET}  # an int field given a payload string


BREAKERS: dict[str, tuple[type[AgentContract], str]] = {
    "execute returns a dict": (ReturnsDict, "execute() must return a Result, not dict"),
    "output is not JSON": (NotJson, "TypeError: Type is not JSON serializable: Opaque"),
    "post_process returns a list": (
        BadPostProcess,
        "post_process() must return a Result or a dict, not list",
    ),
    "post_process metrics do not validate": (BadMetrics, "tokens_used: Input should be"),
}
