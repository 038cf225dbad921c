"""PipelineBatcher: concurrent callers share round trips and each gets exactly its replies."""

from __future__ import annotations

import asyncio

import pytest
import redis.exceptions as rex
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from deepagents.gateway.batcher import Commands, PipelineBatcher


async def test_each_caller_gets_its_own_replies_and_errors(client: Redis, prefix: str) -> None:
    batcher = PipelineBatcher(client)
    await client.set(f"{prefix}:str", "x")

    def commands(i: int) -> Commands:
        def add(pipe: Pipeline) -> None:
            pipe.set(f"{prefix}:k{i}", i)
            pipe.incrby(f"{prefix}:k{i}", i)
            if i % 3 == 0:  # an error reply for this caller only
                pipe.zadd(f"{prefix}:str", {"m": 1})

        return add

    replies = await asyncio.gather(*(batcher.execute(commands(i)) for i in range(30)))
    for i, reply in enumerate(replies):
        assert reply[:2] == [True, 2 * i]
        if i % 3 == 0:
            assert len(reply) == 3 and isinstance(reply[2], rex.ResponseError)
        else:
            assert len(reply) == 2


async def test_a_cancelled_caller_does_not_disturb_the_others(client: Redis, prefix: str) -> None:
    batcher = PipelineBatcher(client)
    first = asyncio.ensure_future(batcher.execute(lambda pipe: pipe.incr(f"{prefix}:n")))
    second = asyncio.ensure_future(batcher.execute(lambda pipe: pipe.incr(f"{prefix}:n")))
    second.cancel()
    third = asyncio.ensure_future(batcher.execute(lambda pipe: pipe.incr(f"{prefix}:n")))
    assert len(await first) == 1 and len(await third) == 1
    with pytest.raises(asyncio.CancelledError):
        await second


async def test_a_connection_error_reaches_every_caller() -> None:
    dead = Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    batcher = PipelineBatcher(dead)
    results = await asyncio.gather(
        *(batcher.execute(lambda pipe: pipe.ping()) for _ in range(3)), return_exceptions=True
    )
    assert all(isinstance(r, rex.ConnectionError) for r in results)
    await dead.aclose()
