"""The Orchestrator: the Python API upstream services submit tasks through.

A facade over its parts, each one concern: the submit path (``submit.py``: validation,
routing, idempotency, backlog refusals, spans), results on the reply channel
(``results.py``), queries about one task (``queries.py``), cancels (``cancel.py``), human
replies (``replies.py``) and children (``children.py``). It owns the routing in force
(``reload``) and the rollout refresher.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from deepagents.compose import RedisClient, Services, open_services, services_for
from deepagents.config.schema import FileConfig
from deepagents.config.settings import Settings
from deepagents.contract.agent import AgentContract
from deepagents.contract.event_sink import event_sink
from deepagents.contract.result import Result
from deepagents.contract.task import Task
from deepagents.errors import ConfigError
from deepagents.orchestrator.cancel import Cancels
from deepagents.orchestrator.children import Children
from deepagents.orchestrator.handle import BacklogRefused, TaskHandle
from deepagents.orchestrator.queries import TaskQueries
from deepagents.orchestrator.replies import (
    CheckRunner,
    Question,
    Replied,
    Replies,
    WaitingPage,
)
from deepagents.orchestrator.results import Results
from deepagents.orchestrator.routing import Route, Router, Routes, agent_specs
from deepagents.orchestrator.submit import Submitter
from deepagents.orchestrator.unserved import Unserved
from deepagents.orchestrator.versions import version_routing
from deepagents.store.base import Registry, TaskRecords
from deepagents.store.registry import AgentHealth
from deepagents.telemetry.core import Telemetry, process_telemetry
from deepagents.transport.base import ChildEnded, MessageBus, Waiting, WaitingCursor


class Orchestrator:
    """Use as ``async with Orchestrator.from_client(client, config=..., settings=...) as
    orch:``, or give it the services (``deepagents.compose``) a process shares."""

    def __init__(
        self,
        services: Services,
        *,
        config: FileConfig,
        settings: Settings,
        agents: Iterable[type[AgentContract]] = (),
        telemetry: Telemetry | None = None,
        owns_services: bool = False,
    ) -> None:
        self.telemetry = telemetry or process_telemetry()
        self.settings = settings
        self.services = services
        self._owns_services = owns_services
        self.keys = services.keys
        self.bus: MessageBus = services.bus
        self.tasks: TaskRecords = services.tasks
        self.registry: Registry = services.registry
        self._agent_classes = tuple(agents)
        self.versions = version_routing(config, services, self.telemetry)
        self._versions_task: asyncio.Task[None] | None = None
        self._started = False
        router = Router(config, agent_specs(config, agents), self.keys, self.versions)
        self.routes = Routes(config, router)
        self.reply_channel = self.keys.reply_channel(uuid.uuid4().hex)
        self.results = Results(self.bus, self.tasks, self.reply_channel)
        self.submits = Submitter(
            self.routes,
            bus=self.bus,
            tasks=self.tasks,
            settings=settings,
            telemetry=self.telemetry,
            results=self,
            unserved=Unserved(self.registry, config),
        )
        self.queries = TaskQueries(self.bus, self.tasks, self.keys)
        events = event_sink(settings.outbox)
        self.answers = Replies(
            self.bus,
            self.tasks,
            self.keys,
            events=events,
            metrics=self.telemetry.metrics,
            max_answer_bytes=settings.max_payload_bytes,
        )
        self.children = Children(self.bus, self.tasks, self.keys, events=events)
        self.cancels = Cancels(
            self.routes,
            bus=self.bus,
            tasks=self.tasks,
            keys=self.keys,
            children=self.children,
            events=events,
        )

    @property
    def config(self) -> FileConfig:
        return self.routes.config

    @property
    def router(self) -> Router:
        return self.routes.router

    @classmethod
    def from_client(
        cls,
        client: RedisClient,
        *,
        config: FileConfig,
        settings: Settings,
        agents: Iterable[type[AgentContract]] = (),
        telemetry: Telemetry | None = None,
    ) -> Orchestrator:
        """An orchestrator over a client the caller opened and closes."""
        services = services_for(client, settings)
        return cls(
            services,
            config=config,
            settings=settings,
            agents=agents,
            telemetry=telemetry,
            owns_services=True,
        )

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        config: FileConfig,
        agents: Iterable[type[AgentContract]] = (),
        telemetry: Telemetry | None = None,
    ) -> Orchestrator:
        """An orchestrator over a Redis client of its own (``DEEPAGENTS_REDIS_URL``),
        closed with it."""
        return cls(
            open_services(settings),
            config=config,
            settings=settings,
            agents=agents,
            telemetry=telemetry,
            owns_services=True,
        )

    def reload(self, config: FileConfig) -> None:
        """Route with ``config`` from now on: its strategies, agents, intents and backlog
        limits. A file the running fleet cannot take raises ``ConfigError`` and changes
        nothing: other tier names, or another shard count for a known agent type (tasks
        would go to streams no worker reads, or to other shards than before)."""
        old = self.routes.config
        if config.tier_names != old.tier_names:
            raise ConfigError(
                f"the tiers changed ({', '.join(old.tier_names)} -> "
                f"{', '.join(config.tier_names)}); that needs a restart of every process"
            )
        if set(config.rollouts) != set(old.rollouts):
            raise ConfigError(
                "the agents under a rollout changed; that needs a restart of every process "
                "(their tasks move between unversioned and per-version streams)"
            )
        for name in self.router.specs.keys() & config.agents.keys():
            before, after = self.router.specs[name].shards, config.agent_settings(name).shards
            if before != after:
                raise ConfigError(
                    f"agent {name}: shards changed ({before} -> {after}); that needs a restart "
                    "of every process",
                    field=f"agents.{name}.settings.shards",
                )
        if self.versions is not None:
            self.versions.config = config
        self.submits.unserved.reload(config)
        specs = agent_specs(config, self._agent_classes)
        router = Router(config, specs, self.keys, self.versions)
        self.routes.router, self.routes.config = router, config

    async def __aenter__(self) -> Orchestrator:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Subscribe to this orchestrator's reply channel before anything is submitted."""
        if self._started:
            return
        self._started = True
        await self.results.start()
        if self.versions is not None:  # routing knows the rollouts before the first submit
            await self.versions.refresh()
            self._versions_task = asyncio.create_task(self.versions.run(), name="rollouts")

    async def aclose(self) -> None:
        if self._versions_task is not None:
            self._versions_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._versions_task
            self._versions_task = None
        await self.results.aclose()
        self._started = False
        if self._owns_services:  # the bus's own connections, if any (DEEPAGENTS_MIN_REPLICAS)
            await self.services.aclose()

    # submit -------------------------------------------------------------------------------

    async def submit(
        self,
        task: Task | Mapping[str, Any],
        *,
        recorded: bool = False,
        delay: timedelta | None = None,
    ) -> TaskHandle:
        """Validate, route and enqueue one task. Raises a SubmitError; nothing is enqueued
        then. Concurrent calls share their round trips (``coalesce.py``), each with its own
        outcome. ``recorded``: the caller wrote the task's location record (``locations``).
        ``delay``: run it no earlier than that from now (sets ``not_before``; a task runs
        later with either, state ``scheduled`` until due)."""
        return await self.submits.submit(task, recorded=recorded, delay=delay)

    async def submit_many(
        self, tasks: Sequence[Task | Mapping[str, Any]], *, recorded: Collection[str] = ()
    ) -> list[TaskHandle]:
        """Validate all first (one bad task enqueues none), then enqueue in one round trip
        (a large batch over several shards: in parts side by side, ``parts.py``).
        When a tracer records, each task gets a PRODUCER span whose traceparent it carries.
        A stream over its backlog limit raises ``BacklogRefused``, which names the tasks
        of the call that were enqueued all the same.

        ``recorded``: task ids whose location keys the caller already wrote (see
        ``locations``), in a round trip it makes anyway; they are not written again."""
        return await self.submits.submit_many(tasks, recorded=recorded)

    def locations(self, tasks: Iterable[Task]) -> list[tuple[str, str]]:
        """(key, value) of the location record of each task that routes; a task that does
        not route is left out (``submit_many`` refuses it). Values and TTL (``location_ttl_s``)
        are what ``submit_many`` writes with the enqueue."""
        return self.submits.locations(tasks)

    async def unserved(self, agent: str) -> str | None:
        """A warning when no live worker serves ``agent`` now (read at most once a second),
        else None: what a submit's handle carries in ``warning``."""
        return await self.submits.unserved.warning(agent)

    @property
    def location_ttl_s(self) -> int:
        return self.submits.location_ttl_s

    def overloaded(self, route: Route, refused: int, accepted: list[TaskHandle]) -> BacklogRefused:
        """The refusal ``submit_many`` raises when ``refused`` tasks found ``route``'s stream
        over its backlog limit; ``accepted`` are the handles of the tasks that were enqueued."""
        return self.submits.overloaded(route, refused, accepted)

    # health -------------------------------------------------------------------------------

    async def agent_health(self) -> dict[str, AgentHealth]:
        """Per configured agent type: registered instances, fresh ones (heartbeat within the
        visibility timeout) and healthy ones (fresh, last ``health_check()`` passed)."""
        config = self.routes.config
        out: dict[str, AgentHealth] = {}
        for name in sorted(self.routes.router.specs):
            stale_ms = config.agent_settings(name).visibility_timeout_ms
            out.update(await self.registry.health([name], stale_ms=stale_ms))
        return out

    async def healthy_agents(self) -> set[str]:
        """Agent types with at least one healthy instance now."""
        return {name for name, health in (await self.agent_health()).items() if health.ok}

    # results and task queries -------------------------------------------------------------

    async def wait_result(
        self,
        handle: TaskHandle,
        timeout: float | None,
        *,
        poll_s: float = 0.5,
        max_poll_s: float = 2.0,
    ) -> Result:
        """The task's Result. The reply channel answers tasks this orchestrator submitted;
        the task hash is read every ``poll_s`` (doubling up to ``max_poll_s``) in case a
        notification was lost, and for a task submitted elsewhere, which only polling sees.
        A poll that fails because Redis is unreachable does not end the wait: the result is
        kept in Redis, and polling goes on until the timeout (then that error is raised)."""
        return await self.results.wait(handle, timeout, poll_s=poll_s, max_poll_s=max_poll_s)

    async def get_result(self, task_id: str) -> Result | None:
        return await self.queries.result(task_id)

    async def task_state(self, task_id: str) -> str | None:
        return await self.queries.state(task_id)

    async def lookup(self, task_id: str) -> dict[str, Any] | None:
        """The task hash (state, owner, attempt, result, …) found through its location key."""
        return await self.queries.lookup(task_id)

    async def cancel(self, task_id: str) -> str:
        """Cancel a task that has not ended: queued, scheduled, running, or waiting for a
        reply or for its children. Returns 'ok', 'missing', or the state (done, dead) that
        made it too late. A running task's worker hears of it on its agent's cancel channel
        and stops its run; its commit, if it races this one, finds the task done. A
        cancelled parent's unfinished children are cancelled too; a cancelled child's end
        goes to its parent."""
        return await self.cancels.cancel(task_id)

    # human replies ------------------------------------------------------------------------

    async def reply(
        self, task_id: str, answer: Any, run_check: CheckRunner | None = None
    ) -> Replied:
        """Answer the question a waiting task asks (``ctx.ask``): validated against the
        question's JSON Schema, stored, and the task re-enqueued on its tier, at most once.
        Raises ``ReplyTaskNotFound``, ``NotWaiting``, ``AlreadyReplied`` or ``InvalidReply``
        (which names the field), and changes nothing then."""
        return await self.answers.reply(task_id, answer, self.routes.config.tier_names, run_check)

    async def question(self, task_id: str) -> Question | None:
        """What a waiting task asks (its question, answer schema, age, when the wait runs
        out); None unless the task waits for a reply."""
        return await self.queries.question(task_id)

    async def waiting(
        self, agent: str | None = None, limit: int = 100, *, tenant: str | None = None
    ) -> list[Waiting]:
        """The oldest ``limit`` open questions (of one agent type, or all), oldest first;
        with ``tenant``, of that tenant's tasks alone, however many others wait."""
        return await self.answers.waiting(self._waiting_shards(agent), limit, tenant)

    async def waiting_page(
        self,
        limit: int = 100,
        *,
        tenant: str | None = None,
        after: WaitingCursor | None = None,
        newest: bool = False,
    ) -> WaitingPage:
        """A page of the open questions of every agent type, oldest (or newest) first,
        starting after ``after`` (the previous page's ``next``); with ``tenant``, of that
        tenant's tasks alone, read from its own index."""
        shards = self._waiting_shards(None)
        return await self.answers.waiting_page(shards, limit, tenant, after=after, newest=newest)

    async def waiting_total(self, tenant: str) -> int:
        """How many open questions the tenant has (its waiting index's size)."""
        return await self.answers.waiting_total(self._waiting_shards(None), tenant)

    def _waiting_shards(self, agent: str | None) -> list[tuple[str, int]]:
        specs = self.routes.router.specs
        names = [agent] if agent is not None else sorted(specs)
        return [
            (name, shard) for name in names if name in specs for shard in range(specs[name].shards)
        ]

    # delegation (worker/delegation.py's Parentage) ------------------------------------------

    async def submit_child(self, child: Task) -> None:
        """Submit a child task (its id derived from its parent's: a second submit finds it
        there) and name its parent on its task hash. A parent submitted through the gateway
        has an owner (its tenant): the child gets the same, first, so that tenant reads it
        by id (``GET /v1/tasks/{id}``) as it reads the parent."""
        assert child.parent_id is not None
        owner = await self.tasks.owner(child.parent_id)
        if owner is not None:
            pair = (self.tasks.owner_key(child.task_id), owner)
            await self.bus.set_many([pair], self.location_ttl_s, what="a child's owner record")
        handle = await self.submit(child)
        await self.children.link(child, handle.agent, handle.shard)

    async def child_result(self, task_id: str) -> Result | None:
        return await self.get_result(task_id)

    async def child_ended(self, parent_id: str, child_id: str, result_json: bytes) -> ChildEnded:
        tiers = self.routes.config.tier_names
        return await self.children.ended(parent_id, child_id, result_json, tiers)


def submitter(orchestrator: Orchestrator) -> Callable[[Task], Awaitable[str]]:
    """Submit one task through ``orchestrator`` and give its id (a worker's escalations)."""

    async def submit(task: Task) -> str:
        return (await orchestrator.submit(task)).task_id

    return submit
