"""An orchestrator's reply channel, read on a connection of its own.

Workers ``PUBLISH`` each committed result to the channel of the orchestrator that submitted
the task. Through redis-py's ``PubSub.get_message``, with every reply validated, that cost
the submitter 37-54 µs of CPU per reply on the reference machine; read on the subscribed
connection directly, and validated only when someone waits for it, 20-23 µs
(``loadtests/bench_replies.py``). A submitter taking thousands of results a second, the
gateway above all, pays it on every task.

Pub/sub is fire and forget: a message published while the connection is down is lost.
Waiters poll the task hash as well (``Orchestrator.wait_result``), so a lost message
delays a result, never loses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import redis.exceptions as rex
from redis.asyncio import Redis, RedisCluster

from deepagents.errors import TransportError
from deepagents.transport.redis_streams.pool import own_connection

log = logging.getLogger("deepagents.orchestrator")  # the submitter it serves

# A silent connection is asked for a PING after this long; one that stays silent for
# another such span is dead and replaced.
SILENCE_S = 5.0
# How the connection shows in CLIENT LIST.
CLIENT_NAME = "deepagents-replies"


class ReplyChannel:
    """Subscribes in ``open()`` (before anything is submitted, so no reply can be missed),
    then ``run()`` hands each message's payload to ``deliver`` until cancelled, reconnecting
    with backoff. ``aclose()`` closes the connection."""

    def __init__(
        self, client: Redis | RedisCluster, channel: str, deliver: Callable[[bytes], None]
    ) -> None:
        self._client = client
        self.channel = channel
        self._deliver = deliver
        self._conn: Any = None

    async def _connection(self) -> Any:
        if isinstance(self._client, RedisCluster):
            await self._client.initialize()  # learns the nodes on first use; then a no-op
        # On a cluster any node will do: PUBLISH reaches every node.
        return own_connection(self._client)

    async def open(self) -> None:
        conn = await self._connection()
        try:
            commands = [("CLIENT", "SETNAME", CLIENT_NAME), ("SUBSCRIBE", self.channel)]
            await conn.send_packed_command(conn.pack_commands(commands), check_health=False)
            with contextlib.suppress(rex.ResponseError):  # e.g. an ACL without CLIENT:
                await conn.read_response(timeout=SILENCE_S)  # the name is a courtesy
            # RESP3 sends pub/sub traffic as push messages, which redis-py hands back only
            # when asked for (push_request); RESP2 sends plain arrays, returned either way.
            reply = await conn.read_response(timeout=SILENCE_S, push_request=True)
        except (rex.RedisError, OSError) as exc:
            await conn.disconnect(nowait=True)
            raise TransportError(f"cannot subscribe to {self.channel}: {exc}") from exc
        if not _is(reply, b"subscribe"):
            await conn.disconnect(nowait=True)
            raise TransportError(f"unexpected answer to SUBSCRIBE: {reply!r}")
        self._conn = conn

    async def run(self) -> None:
        delay = 0.05
        while True:
            try:
                if self._conn is None:
                    await self.open()
                    delay = 0.05
                await self._read(self._conn)
            except (TransportError, rex.RedisError, OSError) as exc:
                log.warning("reply channel failed (waiters poll meanwhile): %s", exc)
                await self._drop()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _read(self, conn: Any) -> None:
        pinged = False
        while True:
            message = await conn.read_response(
                timeout=SILENCE_S, disconnect_on_error=False, push_request=True
            )
            if message is None:  # what redis-py answers when the given timeout passes
                if pinged:
                    raise TransportError(f"no answer on {self.channel} for {2 * SILENCE_S} s")
                await conn.send_packed_command(conn.pack_command("PING"), check_health=False)
                pinged = True
                continue
            pinged = False
            if _is(message, b"message") and len(message) == 3:
                try:
                    self._deliver(message[2])
                except Exception:  # a bad reply must not end the channel
                    log.exception("reply handler failed")

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.disconnect(nowait=True)

    async def aclose(self) -> None:
        await self._drop()


def _is(message: Any, kind: bytes) -> bool:
    return isinstance(message, list) and bool(message) and message[0] == kind
