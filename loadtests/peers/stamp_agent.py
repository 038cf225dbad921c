"""deepagents' no-op agent for bench_peers.py: records enqueue -> handler start in
``can_handle``, the first method of the contract a delivery runs (``stamp.py``); async,
as the peers' handlers are (a synchronous override would run in the worker's threads)."""

from typing import Any

from stamp import record

from deepagents import AgentContract, Result, Task


class StampAgent(AgentContract):
    name = "stamp"
    version = "1.0.0"
    intents = ("stamp",)

    async def can_handle(self, task: Task) -> bool:
        record(int(task.payload.get("t", 0)))
        return True

    async def execute(self, context: dict[str, Any]) -> Result:
        return Result(output={})
