"""Test an agent in a unit test: the real worker and orchestrator over a ``MemoryBus``, so a
task goes through the whole delivery protocol (begin, owner-checked commit, retries with
backoff, deadlines, dead letters after ``max_deliveries``) with no Redis and no process::

    async with AgentHarness(MyAgent) as h:
        result = await h.run(Task(intent="my_intent", payload={...}))

Unlike an eager mode that calls the agent directly, a failure that may pass is retried
as it would be in production, and a task that keeps failing ends in the dead letters
(``h.dead_letters()``); an agent that breaks its contract makes ``h.run`` raise
``InvalidResult`` at once. A task that asks a person (``ctx.ask``) waits as in production:
answer it with ``h.reply(task_id, answer)`` (``h.waiting()`` lists the open questions)."""

from __future__ import annotations

import asyncio
from typing import Any

from deepagents.compose import Services, memory_services
from deepagents.config import FileConfig, Settings
from deepagents.config.schema import AgentEntry
from deepagents.contract import AgentContract, Result, Task
from deepagents.errors import ErrorCode, InvalidResult
from deepagents.orchestrator import Orchestrator, Replied, TaskHandle, submitter
from deepagents.store.tasks import DeadLetterEntry
from deepagents.transport.base import Waiting
from deepagents.worker import Upstream, Worker

# One shard, retries after a few milliseconds, and a stop that waits a second for a task
# still running: a test waits for nothing it does not test. Override any setting with
# ``AgentHarness(MyAgent, settings={...})``.
FAST: dict[str, Any] = {"shards": 1, "retry": {"base_ms": 5, "max_ms": 50}, "grace_period_s": 1}


class AgentHarness:
    """One agent type, one worker and one orchestrator over in-memory services."""

    def __init__(
        self,
        agent: type[AgentContract],
        *,
        settings: dict[str, Any] | None = None,
        config: FileConfig | None = None,
    ) -> None:
        self.agent = agent()
        base = config or FileConfig()
        # The config's own settings for the agent (its retry rules, ...) over the fast ones.
        given = base.agents.get(agent.name) or AgentEntry()
        entry = given.model_copy(
            update={"settings": {**FAST, **given.settings, **(settings or {})}}
        )
        self.config = base.model_copy(update={"agents": {**base.agents, agent.name: entry}})
        self.settings = Settings(prefix="harness", consumer="harness")
        self.services: Services = memory_services(self.settings)
        self.orchestrator = Orchestrator(
            self.services, config=self.config, settings=self.settings, agents=[agent]
        )
        self.worker = Worker(
            self.agent,
            services=self.services,
            config=self.config,
            settings=self.settings,
            upstream=Upstream(submitter(self.orchestrator), self.orchestrator),
        )
        self._running: asyncio.Task[None] | None = None

    async def __aenter__(self) -> AgentHarness:
        self._running = asyncio.create_task(self.worker.run(), name="harness-worker")
        ready = asyncio.create_task(self.worker.ready.wait())
        await asyncio.wait([ready, self._running], return_when=asyncio.FIRST_COMPLETED)
        if not ready.done():  # the worker ended before it was ready: its error, as raised
            await self._running
        await self.orchestrator.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.orchestrator.__aexit__(*exc)
        self.worker.stop()
        if self._running is not None:
            await self._running
        await self.services.aclose()

    async def run(self, task: Task, *, timeout: float = 30.0) -> Result:
        """Submit the task and wait for its result, as an upstream service does. An agent
        that broke its contract (a method returned the wrong type, output not JSON) is a
        bug, not a result: ``InvalidResult`` is raised with its cause, from its first run."""
        handle = await self.orchestrator.submit(task)
        result = await handle.result(timeout=timeout)
        if result.error is not None and result.error.code == ErrorCode.DEAD_LETTERED:
            for dead in await self.dead_letters():
                if dead.task_id == result.task_id and dead.reason == ErrorCode.INVALID_RESULT:
                    raise InvalidResult(dead.error.removeprefix("InvalidResult: "))
        return result

    async def submit(self, task: Task) -> TaskHandle:
        """Submit without waiting: for a task that will wait for a reply."""
        return await self.orchestrator.submit(task)

    async def waiting(self) -> list[Waiting]:
        """The open questions, oldest first."""
        return await self.orchestrator.waiting()

    async def reply(self, task_id: str, answer: Any) -> Replied:
        """Answer a waiting task's question, as a person would (``Orchestrator.reply``)."""
        return await self.orchestrator.reply(task_id, answer)

    async def dead_letters(self) -> list[DeadLetterEntry]:
        """The agent's dead-lettered tasks, oldest first."""
        keys = self.services.keys.shard(self.agent.name, 0)
        return await self.services.tasks.dead_letters(self.agent.name, keys, 1000)
