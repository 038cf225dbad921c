"""Where each recurring schedule has got to: the newest slot fired or passed over, in Redis,
moved only forward (a script: a slow leader that lost the lease never moves it back); and
what every leader must agree on besides: whether it is paused, and the slot an overlap
policy of buffer_one holds."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams.errors import redis_errors

_ADVANCE = """
local at = tonumber(redis.call('GET', KEYS[1]) or '-1')
if at == nil or at < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
return 1
"""


class ScheduleCursors:
    def __init__(self, client: Redis, keys: Keys) -> None:
        self.client: Any = client
        self.keys = keys
        self._advance = client.register_script(_ADVANCE)

    async def slot(self, name: str) -> int | None:
        """The newest slot (ms since the epoch) of ``name`` already dealt with; None before
        its first. A damaged value reads as None: the schedule starts again from now."""
        with redis_errors(f"read schedule {name}'s slot"):
            raw = await self.client.get(self.keys.schedule_cursor(name))
        try:
            return None if raw is None else int(raw)
        except ValueError:
            return None

    async def advance(self, name: str, slot_ms: int) -> None:
        with redis_errors(f"advance schedule {name}'s slot"):
            await self._advance(keys=[self.keys.schedule_cursor(name)], args=[slot_ms])

    async def paused(self, name: str) -> bool:
        with redis_errors(f"read whether schedule {name} is paused"):
            return bool(await self.client.exists(self.keys.schedule_paused(name)))

    async def pause(self, name: str, note: str) -> None:
        with redis_errors(f"pause schedule {name}"):
            await self.client.set(self.keys.schedule_paused(name), note)

    async def resume(self, name: str) -> bool:
        """Whether it was paused."""
        with redis_errors(f"resume schedule {name}"):
            return bool(await self.client.delete(self.keys.schedule_paused(name)))

    async def buffered(self, name: str) -> int | None:
        """The slot held by buffer_one, None without one (or a damaged value)."""
        with redis_errors(f"read schedule {name}'s buffered slot"):
            raw = await self.client.get(self.keys.schedule_buffered(name))
        try:
            return None if raw is None else int(raw)
        except ValueError:
            return None

    async def hold(self, name: str, slot_ms: int | None) -> None:
        """Hold ``slot_ms`` (None: hold nothing any more)."""
        key = self.keys.schedule_buffered(name)
        with redis_errors(f"write schedule {name}'s buffered slot"):
            if slot_ms is None:
                await self.client.delete(key)
            else:
                await self.client.set(key, slot_ms)
