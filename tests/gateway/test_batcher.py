"""PipelineBatcher: concurrent callers share round trips and each gets exactly its replies."""

from __future__ import annotations

import asyncio

import pytest
import redis.exceptions as rex
from redis.asyncio import Redis

from deepagents.transport.redis_streams.batcher import Command, PipelineBatcher


async def test_each_caller_gets_its_own_replies_and_errors(client: Redis, prefix: str) -> None:
    batcher = PipelineBatcher(client)
    await client.set(f"{prefix}:str", "x")

    def commands(i: int) -> list[Command]:
        out: list[Command] = [("SET", f"{prefix}:k{i}", i), ("INCRBY", f"{prefix}:k{i}", i)]
        if i % 3 == 0:  # an error reply for this caller only
            out.append(("ZADD", f"{prefix}:str", 1, "m"))
        return out

    try:
        replies = await asyncio.gather(*(batcher.execute(commands(i)) for i in range(30)))
    finally:
        await batcher.aclose()
    for i, reply in enumerate(replies):
        assert reply[:2] == [b"OK", 2 * i]
        if i % 3 == 0:
            assert len(reply) == 3 and isinstance(reply[2], rex.ResponseError)
        else:
            assert len(reply) == 2


async def test_a_cancelled_caller_does_not_disturb_the_others(client: Redis, prefix: str) -> None:
    batcher = PipelineBatcher(client)
    incr: list[Command] = [("INCR", f"{prefix}:n")]
    try:
        callers = [asyncio.ensure_future(batcher.execute(incr)) for _ in range(3)]
        await asyncio.sleep(0)  # each caller runs once: its command is queued for the batch
        first, second, third = callers
        second.cancel()
        # The batch still carries the cancelled caller's INCR: the others' replies must be
        # sliced around it, so the third caller sees the third increment, not the second.
        assert await first == [1] and await third == [3]
        with pytest.raises(asyncio.CancelledError):
            await second
        # An error reply takes its command's place; the next reply is still in step.
        wrong, value = await batcher.execute([("HGET", f"{prefix}:n", "f"), ("GET", f"{prefix}:n")])
        assert isinstance(wrong, rex.ResponseError) and "WRONGTYPE" in str(wrong)
        assert value == b"3"
    finally:
        await batcher.aclose()


async def test_a_connection_error_reaches_every_caller() -> None:
    dead = Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    batcher = PipelineBatcher(dead)
    results = await asyncio.gather(
        *(batcher.execute([("PING",)]) for _ in range(3)), return_exceptions=True
    )
    assert all(isinstance(r, rex.ConnectionError) for r in results)
    await batcher.aclose()
    await dead.aclose()
