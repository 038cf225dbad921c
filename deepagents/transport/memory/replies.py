"""Reply channels in one process: what a commit publishes reaches each listener subscribed
to the channel at that moment, as Redis pub/sub does (fire and forget)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class MemoryReplies:
    """The channels of one MemoryBus: channel name -> subscribed queues."""

    def __init__(self) -> None:
        self.channels: dict[str, set[asyncio.Queue[bytes]]] = {}

    def publish(self, channel: str, payload: bytes) -> None:
        for queue in self.channels.get(channel, ()):
            queue.put_nowait(payload)


class MemoryReplyListener:
    def __init__(
        self, replies: MemoryReplies, channel: str, deliver: Callable[[bytes], None]
    ) -> None:
        self._replies = replies
        self.channel = channel
        self._deliver = deliver
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()

    async def open(self) -> None:
        self._replies.channels.setdefault(self.channel, set()).add(self._queue)

    async def run(self) -> None:
        while True:
            self._deliver(await self._queue.get())

    async def aclose(self) -> None:
        subscribed = self._replies.channels.get(self.channel, set())
        subscribed.discard(self._queue)
        if not subscribed:
            self._replies.channels.pop(self.channel, None)
