"""The Redis key layout (DESIGN.md). Pure functions; everything of one shard shares a hash tag.

Keys touched together in one script (a shard's tier streams, delayed set, dead-letter
and outbox streams, task hashes) share the tag ``{<agent>:<shard>}``, so each script
stays in one hash slot and the same code runs on Redis Cluster.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass, field


def shard_of(task_id: str, shards: int) -> int:
    """Stable across processes and versions (CRC-32, not Python's salted ``hash``)."""
    return zlib.crc32(task_id.encode()) % shards


@dataclass(frozen=True, slots=True)
class ShardKeys:
    """The keys of one shard of one agent type."""

    prefix: str
    agent: str
    shard: int
    # The hash-tagged stem of every key of the shard, built once (keys are built per task).
    tag: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tag", f"{self.prefix}:{{{self.agent}:{self.shard}}}")

    def stream(self, tier: str) -> str:
        return f"{self.tag}:{tier}"

    @property
    def delayed(self) -> str:
        return f"{self.tag}:delayed"

    @property
    def dlq(self) -> str:
        return f"{self.tag}:dlq"

    @property
    def outbox(self) -> str:
        return f"{self.tag}:audit"

    def task(self, task_id: str) -> str:
        return f"{self.tag}:t:{task_id}"

    def steps(self, task_id: str) -> str:
        # A long-running task's step results, state and human answers: beside its task
        # hash, so recording one is owner-checked in the same script as commit.
        return f"{self.tag}:s:{task_id}"

    def question(self, task_id: str) -> str:
        # A waiting task's task JSON and question, one string: kept out of its task hash,
        # whose values then stay short enough for Redis's compact hash encoding.
        return f"{self.tag}:q:{task_id}"

    @property
    def waiting(self) -> str:
        # Tasks waiting for a human reply (score = asked at, ms): the open questions, listed
        # by age; written by the scripts that park, answer, wake and cancel a task.
        return f"{self.tag}:waiting"


def wait_member(task_id: str) -> str:
    """A waiting task's member of its shard's delayed set (score = the wait's deadline).
    Not JSON: the promote script tells it from a delayed task by its first bytes and hands
    it to the wake script. Short: 100,000 waiting tasks hold one each."""
    return f"w:{task_id}"


@dataclass(frozen=True, slots=True)
class Keys:
    """Key builder for one deployment (one prefix)."""

    prefix: str = "da"

    def shard(self, agent: str, shard: int) -> ShardKeys:
        return ShardKeys(self.prefix, agent, shard)

    def location(self, task_id: str) -> str:
        return f"{self.prefix}:loc:{task_id}"

    def owner(self, task_id: str) -> str:
        # The tenant that submitted a task through the gateway; reads by another tenant 404.
        return f"{self.prefix}:gw:owner:{task_id}"

    def idempotency(self, key: str, tenant: str | None) -> str:
        # Hashed: user text never shapes a key name (no brace or length games), and
        # the same key in two tenants never collides.
        digest = hashlib.sha256(f"{tenant or ''}\0{key}".encode()).hexdigest()
        return f"{self.prefix}:idem:{digest}"

    def agent(self, name: str) -> str:
        return f"{self.prefix}:agent:{name}"

    def agent_instances(self, name: str) -> str:
        return f"{self.prefix}:agent:{name}:instances"

    def reply_channel(self, listener_id: str) -> str:
        return f"{self.prefix}:reply:{listener_id}"

    @property
    def agents_index(self) -> str:
        return f"{self.prefix}:agents"
