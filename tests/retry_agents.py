"""Agents that fail with plain exceptions, and count their runs (retry-policy tests)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from deepagents import AgentContract, Result
from deepagents.errors import DeepAgentsError

RUNS: Counter[str] = Counter()


class Lookup(AgentContract):
    """Raises KeyError: a bug by default retried as if it might pass."""

    name = "lookup"
    version = "1.0.0"
    intents = ("lookup",)

    async def execute(self, context: dict[str, Any]) -> Result:
        RUNS[self.name] += 1
        return Result(output={"v": context["payload"]["missing"]})


class Picky(Lookup):
    """Declares every LookupError final on the class."""

    name = "picky"
    intents = ("picky",)
    non_retryable = (LookupError,)


class Flaky(DeepAgentsError):
    """Not retryable by its own default; the agent below says otherwise."""


class Stubborn(AgentContract):
    name = "stubborn"
    version = "1.0.0"
    intents = ("stubborn",)
    always_retry = (Flaky,)

    async def execute(self, context: dict[str, Any]) -> Result:
        RUNS[self.name] += 1
        raise Flaky("the ledger said no")
