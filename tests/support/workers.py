"""An in-process worker for tests: started, ready, and always stopped."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from redis.asyncio import Redis

from agents.echo import EchoAgent
from deepagents.config import FileConfig, Settings
from deepagents.contract import AgentContract
from deepagents.worker import Worker


@contextlib.asynccontextmanager
async def running_worker(
    client: Redis, settings: Settings, config: FileConfig, agent: AgentContract | None = None
) -> AsyncIterator[Worker]:
    """A ``Worker`` for ``agent`` (an ``EchoAgent`` by default), running until the block ends."""
    worker = Worker(agent or EchoAgent(), client=client, config=config, settings=settings)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.ready.wait(), 30)
        yield worker
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)
