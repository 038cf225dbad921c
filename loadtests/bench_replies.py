"""CPU per result notification in the submitter: redis-py's ``PubSub.get_message`` loop with
every reply validated (the orchestrator's listener until session 9), against the
orchestrator's ``ReplyChannel`` (``transport/redis_streams/replies.py``), which reads the subscribed
connection directly and validates a reply only when someone waits for it.

    .venv/bin/python loadtests/bench_replies.py [--redis-url URL] [--messages 20000]

Three rounds, alternating (default: a fresh embedded Redis). The publisher runs in the same
process; its own CPU, measured publishing to a channel nobody reads, is subtracted.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's package

from redis_target import bench_main

from deepagents.config import Settings, parse_config
from deepagents.contract import Result
from deepagents.contract.codec import decode_result
from deepagents.orchestrator import Orchestrator
from deepagents.transport.redis_streams import connect

CONFIG = "agents: {echo: {class: 'agents.echo:EchoAgent'}}"


def _message(i: int) -> bytes:
    result = Result(task_id=f"0192f000-0000-7000-8000-{i:012d}", output={"i": i})
    return result.model_dump_json().encode()


async def publish(url: str, channel: str, messages: list[bytes]) -> float:
    """Publish every message; the CPU seconds it took this process."""
    client = connect(url)
    start = time.process_time()
    for i in range(0, len(messages), 500):
        pipe = client.pipeline(transaction=False)
        for message in messages[i : i + 500]:
            pipe.publish(channel, message)
        await pipe.execute()
    spent = time.process_time() - start
    await client.aclose()
    return spent


async def via_pubsub(url: str, messages: list[bytes]) -> float:
    client = connect(url)
    pubsub: Any = client.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe("bench:pubsub")
    got = 0

    async def listen() -> None:
        nonlocal got
        while got < len(messages):
            message = await pubsub.get_message(timeout=1.0)
            if message is not None and message.get("type") == "message":
                decode_result(message["data"])
                got += 1

    listener = asyncio.ensure_future(listen())
    start = time.process_time()
    await publish(url, "bench:pubsub", messages)
    await listener
    spent = time.process_time() - start
    await pubsub.aclose()
    await client.aclose()
    return spent


async def via_reply_channel(url: str, messages: list[bytes]) -> float:
    client = connect(url)
    settings = Settings(prefix="benchreplies")
    async with Orchestrator.from_client(
        client, config=parse_config(CONFIG), settings=settings
    ) as orch:
        start = time.process_time()
        await publish(url, orch.reply_channel, messages)
        while len(orch.results._arrived) < len(messages):
            await asyncio.sleep(0.005)
        spent = time.process_time() - start
    await client.aclose()
    return spent


async def measure(url: str, n: int) -> None:
    messages = [_message(i) for i in range(n)]
    for _ in range(3):
        alone = await publish(url, "bench:nobody", messages)
        old = await via_pubsub(url, messages)
        new = await via_reply_channel(url, messages)
        print(
            f"PubSub.get_message + validate {(old - alone) / n * 1e6:.1f} µs/reply, "
            f"ReplyChannel {(new - alone) / n * 1e6:.1f} µs/reply"
        )


if __name__ == "__main__":
    bench_main(__doc__, "messages", 20_000, measure)
