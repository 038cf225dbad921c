"""The orchestrator's reply channel: results arrive through it (the task hash is empty in
these tests, so polling cannot be what answers), survive a killed connection, and a bad
message is skipped."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis

from deepagents.config import FileConfig, Settings, load_config
from deepagents.contract import Result
from deepagents.orchestrator import Orchestrator
from deepagents.orchestrator.handle import TaskHandle
from deepagents.transport.redis_streams import connect, replies
from deepagents.transport.redis_streams.replies import CLIENT_NAME
from tests.support.wait import eventually

REPO = Path(__file__).resolve().parents[2]


def _config() -> FileConfig:
    return load_config(REPO / "config" / "deepagents.yaml")


def _handle(orch: Orchestrator, task_id: str) -> TaskHandle:
    return TaskHandle(task_id, "echo", "p2", 0, False, orch)


def _reply(task_id: str, output: int) -> bytes:
    return Result(task_id=task_id, output=output).model_dump_json().encode()


async def _publish_until_heard(client: Redis, channel: str, message: bytes) -> None:
    """PUBLISH answers how many subscribers got it: 0 while the channel reconnects."""
    await eventually(lambda: client.publish(channel, message), what="a subscriber")


async def test_a_waiter_gets_its_result_through_the_channel(
    client: Redis, settings: Settings
) -> None:
    async with Orchestrator.from_client(client, config=_config(), settings=settings) as orch:
        waiting = asyncio.ensure_future(orch.wait_result(_handle(orch, "t-wait"), 30, poll_s=30))
        await eventually(lambda: _true("t-wait" in orch.results._waiters), what="the waiter")
        await _publish_until_heard(client, orch.reply_channel, _reply("t-wait", 1))
        assert (await asyncio.wait_for(waiting, 10)).output == 1


async def test_a_result_that_came_first_is_kept_until_asked(
    client: Redis, settings: Settings
) -> None:
    async with Orchestrator.from_client(client, config=_config(), settings=settings) as orch:
        await client.publish(orch.reply_channel, b"not json")  # skipped, channel goes on
        await client.publish(orch.reply_channel, orjson.dumps({"task_id": 7}))  # skipped too
        await _publish_until_heard(client, orch.reply_channel, _reply("t-early", 2))
        await eventually(lambda: _true("t-early" in orch.results._arrived), what="the early reply")
        result = await orch.wait_result(_handle(orch, "t-early"), 1)
        assert (result.task_id, result.output) == ("t-early", 2)


async def test_the_channel_reconnects_after_its_connection_is_killed(
    client: Redis, settings: Settings
) -> None:
    async with Orchestrator.from_client(client, config=_config(), settings=settings) as orch:
        ours = [c for c in await client.client_list() if c["name"] == CLIENT_NAME]
        channels = await client.pubsub_channels(orch.reply_channel)
        assert ours and channels == [orch.reply_channel.encode()]
        for conn in ours:
            await client.client_kill_filter(_id=conn["id"])
        waiting = asyncio.ensure_future(orch.wait_result(_handle(orch, "t-again"), 30, poll_s=30))
        await _publish_until_heard(client, orch.reply_channel, _reply("t-again", 3))
        assert (await asyncio.wait_for(waiting, 10)).output == 3


async def test_a_silent_channel_is_pinged_and_kept(
    client: Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replies, "SILENCE_S", 0.1)
    async with Orchestrator.from_client(client, config=_config(), settings=settings) as orch:

        async def pinged() -> list[dict[str, str]]:
            conns = [c for c in await client.client_list() if c["name"] == CLIENT_NAME]
            return [c for c in conns if c["cmd"] == "ping"]

        (first,) = await eventually(pinged, what="a PING on the silent channel")

        async def kept() -> bool:  # a second on, ten silences: answered, never replaced
            return any(c["id"] == first["id"] and int(c["age"]) >= 1 for c in await pinged())

        await eventually(kept, timeout=10, what="the same connection a second later")
        await _publish_until_heard(client, orch.reply_channel, _reply("t-quiet", 4))
        assert (await orch.wait_result(_handle(orch, "t-quiet"), 10, poll_s=30)).output == 4


async def _true(value: bool) -> bool:
    return value


async def test_a_user_without_client_commands_still_gets_replies(
    client: Redis, redis_url: str, settings: Settings, prefix: str
) -> None:
    """The channel names its connection (CLIENT SETNAME) as a courtesy: an ACL that denies
    CLIENT commands still subscribes."""
    user = f"{prefix}-noclient"
    await client.acl_setuser(
        user, enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
        commands=["+@all", "-client"],
    )  # fmt: skip
    limited = connect(redis_url.replace("redis://", f"redis://{user}:pw@", 1))
    try:
        async with Orchestrator.from_client(limited, config=_config(), settings=settings) as orch:
            waiting = asyncio.ensure_future(orch.wait_result(_handle(orch, "t-acl"), 30, poll_s=30))
            await _publish_until_heard(client, orch.reply_channel, _reply("t-acl", 5))
            assert (await asyncio.wait_for(waiting, 10)).output == 5
    finally:
        await limited.aclose()
        await client.acl_deluser(user)


async def test_a_resp2_client_gets_replies_too(
    client: Redis, redis_url: str, settings: Settings
) -> None:
    """RESP2 sends pub/sub messages as plain arrays, RESP3 as push messages: both read."""
    resp2 = connect(redis_url + ("&" if "?" in redis_url else "?") + "protocol=2")
    try:
        async with Orchestrator.from_client(resp2, config=_config(), settings=settings) as orch:
            listener = orch.results._replies
            assert isinstance(listener, replies.ReplyChannel)
            assert listener._conn.protocol in (2, "2")
            waiting = asyncio.ensure_future(
                orch.wait_result(_handle(orch, "t-resp2"), 30, poll_s=30)
            )
            await _publish_until_heard(client, orch.reply_channel, _reply("t-resp2", 6))
            assert (await asyncio.wait_for(waiting, 10)).output == 6
    finally:
        await resp2.aclose()
