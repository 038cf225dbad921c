"""Rollout state and per-version figures in Redis.

- ``da:rollout:<agent>`` (hash: ``doc`` JSON, ``rev``): written only by a compare-and-set
  on ``rev``, so the controller and an operator's CLI never overwrite each other's change
  unseen; the first reader writes the configuration's initial values (``HSETNX``).
- ``da:rollout:{<agent>}:stats:<version>:<bucket>`` (hash: ``n``, ``err``, ``h<i>``): what
  each version's workers committed, counted after the commit landed, in 5 s buckets that
  expire after a day. The controller reads these, not Prometheus: it must work fleet-wide
  where no Prometheus runs, and a counter here is already summed over every worker.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

from deepagents.contract.events import AuditEvent
from deepagents.errors import ConfigError
from deepagents.store.rollout_state import (
    BUCKET_S,
    RolloutState,
    VersionWindow,
    window_from_buckets,
)
from deepagents.transport.keys import Keys
from deepagents.transport.outbox import encode_events
from deepagents.transport.redis_streams.errors import redis_errors

STATS_TTL_S = 86_400
# Write the document only if its revision is still the one the writer read.
_SWAP = """
local rev = redis.call('HGET', KEYS[1], 'rev')
if (rev or '0') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'doc', ARGV[2], 'rev', tonumber(ARGV[1]) + 1)
return 1
"""


class RedisRollouts:
    def __init__(self, client: Redis, keys: Keys) -> None:
        self.client: Any = client
        self.keys = keys
        self._swap = client.register_script(_SWAP)

    async def get(self, agent: str) -> RolloutState | None:
        with redis_errors("read a rollout"):
            doc, rev = await self.client.hmget(self.keys.rollout(agent), ["doc", "rev"])
        if doc is None:
            return None
        try:
            return RolloutState.from_json(doc, int(rev or 0))
        except ValueError as exc:  # orjson's decode error is one too
            raise ConfigError(
                f"{self.keys.rollout(agent)} does not hold a rollout ({exc}); delete it to "
                "start again from the configuration's values"
            ) from None

    async def ensure(self, initial: RolloutState) -> RolloutState:
        """The agent's state; the first caller writes ``initial`` (the configuration's)."""
        key = self.keys.rollout(initial.agent)
        with redis_errors("start a rollout"):
            pipe = self.client.pipeline(transaction=False)
            pipe.hsetnx(key, "rev", 1)
            pipe.hsetnx(key, "doc", initial.to_json())
            await pipe.execute()
        found = await self.get(initial.agent)
        assert found is not None
        return found

    async def swap(self, expected: RolloutState, new: RolloutState) -> bool:
        """Write ``new`` if the stored revision is still ``expected.rev``."""
        with redis_errors("change a rollout"):
            done = await self._swap(
                keys=[self.keys.rollout(new.agent)], args=[expected.rev, new.to_json()]
            )
        return bool(done)

    async def live_versions(self, agent: str, stale_ms: int) -> dict[str, int]:
        """Instances with a heartbeat within ``stale_ms``, counted per version they run."""
        with redis_errors("read live versions"):
            pipe = self.client.pipeline(transaction=False)
            pipe.hgetall(self.keys.agent_instances(agent))
            pipe.hgetall(self.keys.agent_versions(agent))
            beats, versions = await pipe.execute()
        now = int(time.time() * 1000)
        out: dict[str, int] = {}
        for instance, ms in beats.items():
            version = versions.get(instance)
            if version is not None and ms.isdigit() and now - int(ms) <= stale_ms:
                name = version.decode(errors="replace")
                out[name] = out.get(name, 0) + 1
        return out

    async def record(self, agent: str, version: str, buckets: dict[int, dict[str, int]]) -> None:
        if not buckets:
            return
        with redis_errors("record version outcomes"):
            pipe = self.client.pipeline(transaction=False)
            for start, fields in buckets.items():
                key = self.keys.rollout_stats(agent, version, start)
                for name, n in fields.items():
                    pipe.hincrby(key, name, n)
                pipe.expire(key, STATS_TTL_S)
            await pipe.execute()

    async def audit(self, agent: str, events: Sequence[AuditEvent]) -> None:
        """Decisions go to the agent's shard-0 outbox, drained to the audit log."""
        with redis_errors("audit a rollout decision"):
            outbox = self.keys.shard(agent, 0).outbox
            await self.client.xadd(outbox, {"events": encode_events(events)})

    async def window(
        self, agent: str, versions: Sequence[str], window_s: float, now_s: float | None = None
    ) -> dict[str, VersionWindow]:
        """Each version's figures over the last ``window_s`` seconds (whole buckets)."""
        now_s = time.time() if now_s is None else now_s
        starts = bucket_starts(now_s, window_s)
        with redis_errors("read version outcomes"):
            pipe = self.client.pipeline(transaction=False)
            for version in versions:
                for start in starts:
                    pipe.hgetall(self.keys.rollout_stats(agent, version, start))
            replies = await pipe.execute()
        out = {}
        for i, version in enumerate(versions):
            chunk = replies[i * len(starts) : (i + 1) * len(starts)]
            buckets = [{k.decode(): int(v) for k, v in b.items()} for b in chunk]
            out[version] = window_from_buckets(version, buckets)
        return out


def bucket_starts(now_s: float, window_s: float) -> list[int]:
    """The buckets a window covers, newest first (the current, partial one included)."""
    last = int(now_s) // BUCKET_S * BUCKET_S
    count = max(1, int(-(-window_s // BUCKET_S)))
    return [last - i * BUCKET_S for i in range(count)]
