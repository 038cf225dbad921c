"""Half-open connections (RELIABILITY.md row 19): every connection the worker has to Redis
goes silent at once, as after a NAT or firewall drops its state. Nothing answers, nothing
closes. The worker must notice within its socket timeout (the read block plus 10 s),
reconnect, and finish every task once, without a restart."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from urllib.parse import urlparse

import pytest
from redis.asyncio import Redis

from agents.echo import EchoAgent
from deepagents.config import FileConfig, Settings
from deepagents.contract import ResultStatus, Task
from deepagents.orchestrator import Orchestrator
from deepagents.transport.redis_streams import connect
from deepagents.worker import Worker

pytestmark = pytest.mark.slow


class SilencingProxy:
    """Forwards TCP to Redis; ``silence()`` makes every connection open now stop
    forwarding in both directions, for good, while staying open. New ones work."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.generation = 0
        self.tasks: set[asyncio.Task[None]] = set()
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.url = f"redis://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/0"

    def silence(self) -> None:
        self.generation += 1

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self.writers += [writer, up_writer]
        born = self.generation
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pump(src, dst, born))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, born: int) -> None:
        while data := await src.read(65536):
            if self.generation != born:
                return  # silenced: swallow everything from now on, close nothing
            dst.write(data)
            await dst.drain()

    async def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for writer in self.writers:
            writer.close()
        self.server.close()
        await self.server.wait_closed()


@pytest.fixture
async def proxy(redis_url: str) -> AsyncIterator[SilencingProxy]:
    target = urlparse(redis_url)
    running = SilencingProxy(target.hostname or "127.0.0.1", target.port or 6379)
    await running.start()
    try:
        yield running
    finally:
        await running.close()


async def test_silent_connections_are_dropped_and_work_goes_on(
    client: Redis, proxy: SilencingProxy, config: FileConfig, settings: Settings
) -> None:
    # The worker reaches Redis only through the proxy; the submitter does not.
    through = connect(proxy.url, block_ms=config.agent_settings("echo").block_ms)
    worker = Worker(EchoAgent(), client=through, config=config, settings=settings)
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.ready.wait(), 30)
        async with Orchestrator(client, config=config, settings=settings) as orch:
            before = await orch.submit_many(
                [Task(intent="echo", payload={"i": i}) for i in range(100)]
            )
            await asyncio.gather(*(h.result(timeout=30) for h in before))
            proxy.silence()
            after = await orch.submit_many(
                [Task(intent="echo", payload={"i": i}) for i in range(100)]
            )
            results = await asyncio.gather(*(h.result(timeout=60) for h in after))
        assert all(r.status is ResultStatus.SUCCESS for r in results)
        assert not running.done(), "the worker kept running"
    finally:
        worker.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(running, 30)
        await through.aclose()
    assert worker.stats.committed == 200 and worker.stats.duplicates == 0
