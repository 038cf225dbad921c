"""Cancelling a task that has not ended (queued, scheduled, running, or waiting for a reply
or for its children); a running task's worker hears of it on its agent's cancel channel. A
cancelled parent's unfinished children are cancelled with it, and a child cancelled alone
tells its parent."""

from __future__ import annotations

from deepagents.contract.codec import encode_result
from deepagents.contract.event_sink import EventSink
from deepagents.contract.events import AuditEvent
from deepagents.contract.result import Result
from deepagents.contract.task import utcnow
from deepagents.errors import ErrorCode
from deepagents.orchestrator.children import Children, children_of
from deepagents.orchestrator.routing import Routes
from deepagents.store.base import TaskRecords
from deepagents.transport.base import MessageBus
from deepagents.transport.keys import Keys

_CANCELLED = "cancelled by request"


class Cancels:
    def __init__(
        self,
        routes: Routes,
        *,
        bus: MessageBus,
        tasks: TaskRecords,
        keys: Keys,
        children: Children,
        events: EventSink,
    ) -> None:
        self.routes, self.bus, self.tasks, self.keys = routes, bus, tasks, keys
        self.children, self.events = children, events

    async def cancel(self, task_id: str, *, cascaded: bool = False) -> str:
        """``Orchestrator.cancel``; ``cascaded``: its parent was cancelled."""
        loc = await self.tasks.location(task_id, what="cancel")
        if loc is None:
            return "missing"
        agent = loc.agent
        why = "cancelled with its parent task" if cascaded else _CANCELLED
        result = Result.failed(
            ErrorCode.CANCELLED,
            why,
            task_id=task_id,
            agent=agent,
            finished_at=utcnow(),
        )
        failed = AuditEvent.of("failed", task_id, agent=agent, reason=ErrorCode.CANCELLED)
        events = self.events.keep([failed])
        result_json = encode_result(result)
        status = await self.bus.cancel(
            self.keys.shard(agent, loc.shard),
            task_id,
            result_json,
            events,
            running=True,
            notify=self.keys.cancel_channel(agent),
        )
        if status != "ok":
            return status
        info = await self.tasks.task_fields(loc, task_id)
        for child in children_of(info):  # each one not ended yet ends cancelled, once
            await self.cancel(child, cascaded=True)
        parent = info.get("parent_id")
        if parent and not cascaded:  # a child cancelled alone: its parent hears of it
            tiers = self.routes.config.tier_names
            await self.children.ended(parent, task_id, result_json, tiers)
        return status
