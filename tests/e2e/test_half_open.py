"""Half-open connections (RELIABILITY.md row 19): every connection the worker has to Redis
goes silent at once, as after a NAT or firewall drops its state. Nothing answers, nothing
closes. The worker must notice within its socket timeout (the read block plus 10 s),
reconnect, and finish every task once, without a restart."""

from __future__ import annotations

import asyncio
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
from tests.support.proxy import SilencingProxy

pytestmark = pytest.mark.slow


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
    # The bound the docstring states: a silent connection is given up on after the
    # client's socket timeout; the 100 echo tasks then run well inside the margin on top.
    detection_s = through.connection_pool.connection_kwargs["socket_timeout"]
    assert detection_s == config.agent_settings("echo").block_ms / 1000 + 10
    worker = Worker.from_client(EchoAgent(), client=through, config=config, settings=settings)
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.ready.wait(), 30)
        async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
            before = await orch.submit_many(
                [Task(intent="echo", payload={"i": i}) for i in range(100)]
            )
            await asyncio.gather(*(h.result(timeout=30) for h in before))
            proxy.silence()
            after = await orch.submit_many(
                [Task(intent="echo", payload={"i": i}) for i in range(100)]
            )
            waits = (h.result(timeout=detection_s + 30) for h in after)
            results = await asyncio.gather(*waits)
        assert all(r.status is ResultStatus.SUCCESS for r in results)
        assert not running.done(), "the worker kept running"
    finally:
        worker.stop()
        try:
            # A worker stuck on a silent connection would hang here: that fails the test.
            await asyncio.wait_for(running, 30)
        finally:
            await through.aclose()
    assert worker.stats.committed == 200 and worker.stats.duplicates == 0
