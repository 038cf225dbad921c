"""A separate upstream service flooding one intent: ``python -m tests.support.flood N INTENT``.

Submits N tasks in batches as fast as it can, awaits every result and prints one JSON line
with the latencies it saw (submit to result, seconds)."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import orjson

from deepagents.config import load_config, load_settings
from deepagents.contract import Task
from deepagents.orchestrator import Orchestrator
from deepagents.transport.redis_streams import connect


async def main(total: int, intent: str) -> None:
    settings = load_settings()
    config = load_config(settings.config_path())
    client = connect(os.environ["DEEPAGENTS_REDIS_URL"])
    latencies: list[float] = []

    async def wait(handle: object, start: float) -> None:
        await handle.result(timeout=300)  # type: ignore[attr-defined]
        latencies.append(time.monotonic() - start)

    async with Orchestrator.from_client(client, config=config, settings=settings) as orch:
        waits = []
        sys.stdout.write("started\n")
        sys.stdout.flush()
        for start_n in range(0, total, 500):
            start = time.monotonic()
            batch = [
                Task(intent=intent, payload={"n": i})
                for i in range(start_n, min(total, start_n + 500))
            ]
            for handle in await orch.submit_many(batch):
                waits.append(asyncio.create_task(wait(handle, start)))
        await asyncio.gather(*waits)
    await client.aclose()
    sys.stdout.write(orjson.dumps({"latencies": latencies}).decode() + "\n")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
