"""The Redis key layout (DESIGN.md). Pure functions; everything of one shard shares a hash tag.

Keys touched together in one script (a shard's tier streams, delayed set, dead-letter
and outbox streams, task hashes) share the tag ``{<agent>:<shard>}``, so each script
stays in one hash slot and the same code runs on Redis Cluster.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Mapping
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
    # An agent version under a rollout (docs/rollouts.md): its tier streams and delayed
    # set are its own, under the same hash tag; "" is the unversioned layout.
    version: str = ""
    # The hash-tagged stem of every key of the shard, built once (keys are built per task).
    tag: str = field(init=False, compare=False, repr=False)
    # The stem of the version's own keys (streams, delayed set): the tag when unversioned.
    version_tag: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        tag = f"{self.prefix}:{{{self.agent}:{self.shard}}}"
        object.__setattr__(self, "tag", tag)
        stem = f"{tag}:v:{self.version}" if self.version else tag
        object.__setattr__(self, "version_tag", stem)

    def stream(self, tier: str) -> str:
        return f"{self.version_tag}:{tier}"

    def fair(self, tier: str) -> str:
        # A fair tier's queue ahead of its stream (score = virtual finish time): tasks wait
        # here until a reader moves them in, key by key in weighted turn.
        return f"{self.version_tag}:{tier}:fair"

    def fair_clock(self, tier: str) -> str:
        # The fair queue's virtual clock ('@') and each key's last finish time ('k:<key>').
        return f"{self.version_tag}:{tier}:fairv"

    def fair_running(self, tier: str) -> str:
        # A tier with a per-key cap (``max_running_per_key``): per fairness key, the entry
        # ids it moved into the stream that may still hold a slot (pruned against the PEL).
        return f"{self.version_tag}:{tier}:fairr"

    def fair_held(self, tier: str) -> str:
        # Tasks whose turn came while their key was at its cap, per key in order (one
        # sorted set, read by lexical range: '<#key>:<key><seq><member>').
        return f"{self.version_tag}:{tier}:fairh"

    @property
    def delayed(self) -> str:
        # Per version: a retry goes back to the streams of the version that scheduled it.
        return f"{self.version_tag}:delayed"

    def of_version(self, version: str) -> ShardKeys:
        """The same shard's keys for another version ("" = unversioned)."""
        return ShardKeys(self.prefix, self.agent, self.shard, version)

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

    def tenant_waiting(self, tenant: str) -> str:
        # One tenant's share of the waiting index (same scores), so listing a tenant's open
        # questions never reads another's. Written by park alone: answer, wake and cancel
        # leave their member, which park and the listing drop once the shard's index no
        # longer holds it. A digest: a tenant name may hold any character.
        digest = hashlib.blake2b(tenant.encode(), digest_size=8).hexdigest()
        return f"{self.tag}:waiting:t:{digest}"


def wait_member(task_id: str) -> str:
    """A waiting task's member of its shard's delayed set (score = the wait's deadline).
    Not JSON: the promote script tells it from a delayed task by its first bytes and hands
    it to the wake script. Short: 100,000 waiting tasks hold one each."""
    return f"w:{task_id}"


# A waiting task's hash field naming the agent version whose streams it was parked from
# ('' unversioned): its reply or its children's ends resume it there, where its wait is.
PARKED_VERSION = "parked_version"


def parked_version(task: Mapping[str, str]) -> str:
    """The version a waiting task's hash says it was parked from. A task parked by an older
    release names it in the field ``lane``: read too, as such a task may wait for days."""
    return task.get(PARKED_VERSION) or task.get("lane", "")


@dataclass(frozen=True, slots=True)
class Keys:
    """Key builder for one deployment (one prefix)."""

    prefix: str = "da"

    def shard(self, agent: str, shard: int, version: str = "") -> ShardKeys:
        return ShardKeys(self.prefix, agent, shard, version)

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

    def answer(self, agent: str, cache_key: str) -> str:
        # The last good answer for an agent's cache key (``store/answers.py``), hashed as
        # the idempotency keys are: the agent's text never shapes a key name.
        digest = hashlib.sha256(cache_key.encode()).hexdigest()
        return f"{self.prefix}:ans:{agent}:{digest}"

    def agent(self, name: str) -> str:
        return f"{self.prefix}:agent:{name}"

    def agent_instances(self, name: str) -> str:
        return f"{self.prefix}:agent:{name}:instances"

    def remote_breaker(self, agent: str) -> str:
        # The fleet's circuit breaker of a remote agent's service (state and window share
        # the tag {remote:<agent>}: one script each, on one slot).
        return f"{self.prefix}:{{remote:{agent}}}:cb"

    def remote_breaker_window(self, agent: str) -> str:
        return f"{self.prefix}:{{remote:{agent}}}:cb:win"

    def tool_breaker(self, tool: str) -> str:
        # The fleet's circuit breaker of one tool (deepagents.tools), by its server and name.
        return f"{self.prefix}:{{tool:{tool}}}:cb"

    def tool_breaker_window(self, tool: str) -> str:
        return f"{self.prefix}:{{tool:{tool}}}:cb:win"

    def agent_reads(self, name: str) -> str:
        # What each instance reads (tiers and shards, ``config/placement.py``).
        return f"{self.prefix}:agent:{name}:reads"

    def reply_channel(self, listener_id: str) -> str:
        return f"{self.prefix}:reply:{listener_id}"

    def cancel_channel(self, name: str) -> str:
        # Pub/sub: the ids of an agent's running tasks just cancelled (cancel.lua), heard
        # by its workers.
        return f"{self.prefix}:cancel:{name}"

    def agent_versions(self, name: str) -> str:
        # instance -> the version it runs, beside the instances' heartbeats.
        return f"{self.prefix}:agent:{name}:versions"

    def rollout(self, agent: str) -> str:
        # One JSON document per agent under a rollout: read by orchestrators, written by
        # the CLI and the controller with a revision check (store/rollouts.py).
        return f"{self.prefix}:rollout:{agent}"

    def rollout_stats(self, agent: str, version: str, bucket_s: int) -> str:
        # Outcomes and a latency histogram of one version over one time bucket, counted by
        # its workers when a commit lands; own tag per agent, never touched by a script.
        return f"{self.prefix}:rollout:{{{agent}}}:stats:{version}:{bucket_s}"

    @property
    def rollout_lease(self) -> str:
        return f"{self.prefix}:rollout:lease"

    @property
    def schedules_lease(self) -> str:
        # The recurring schedules' leader (docs/scheduling.md).
        return f"{self.prefix}:schedules:lease"

    def schedule_cursor(self, name: str) -> str:
        # The newest slot (ms) of a schedule that was fired or passed over.
        return f"{self.prefix}:schedule:{name}:slot"

    def schedule_paused(self, name: str) -> str:
        # Present while a schedule is paused (``deepagents schedules pause``): every leader
        # reads it, so a pause outlives a change of leader.
        return f"{self.prefix}:schedule:{name}:paused"

    def schedule_buffered(self, name: str) -> str:
        # overlap buffer_one: the one slot held until the task before it ends.
        return f"{self.prefix}:schedule:{name}:buffered"

    def webhook(self, endpoint: str) -> str:
        # One endpoint's deliveries to make (a stream, in event order); its own key, so a
        # dead endpoint's backlog holds up no other endpoint.
        return f"{self.prefix}:wh:{endpoint}"

    def webhook_lease(self, endpoint: str) -> str:
        # The one dispatcher delivering to the endpoint at a time (in order, one retry clock).
        return f"{self.prefix}:wh:{endpoint}:lease"

    @property
    def webhook_status(self) -> str:
        # endpoint -> its delivery status (JSON): last success, failing since, last error.
        return f"{self.prefix}:wh:status"

    @property
    def agents_index(self) -> str:
        return f"{self.prefix}:agents"
