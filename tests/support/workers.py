"""Services run in-process for tests (a worker, an audit writer): started, ready, and
always stopped."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Protocol, TypeVar

from redis.asyncio import Redis

from agents.echo import EchoAgent
from deepagents.config import FileConfig, Settings
from deepagents.contract import AgentContract
from deepagents.worker import Worker


class Service(Protocol):
    ready: asyncio.Event

    async def run(self) -> None: ...

    def stop(self) -> None: ...


S = TypeVar("S", bound=Service)


@contextlib.asynccontextmanager
async def running(service: S) -> AsyncIterator[S]:
    """``service.run()`` in a task until the block ends; the block starts once it is ready."""
    task = asyncio.create_task(service.run())
    try:
        await asyncio.wait_for(service.ready.wait(), 30)
        yield service
    finally:
        service.stop()
        await asyncio.wait_for(task, 30)


def running_worker(
    client: Redis, settings: Settings, config: FileConfig, agent: AgentContract | None = None
) -> contextlib.AbstractAsyncContextManager[Worker]:
    """A ``Worker`` for ``agent`` (an ``EchoAgent`` by default), running until the block ends."""
    worker = Worker.from_client(
        agent or EchoAgent(), client=client, config=config, settings=settings
    )
    return running(worker)
