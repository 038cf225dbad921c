"""The task records kept beside the streams: the task hash as callers read it, the location
record, idempotency records, the gateway's owner records and the dead letters.

Every key of these records is built here and every command on them is sent from here, so
their formats have one owner. The scripts that change a task hash atomically with its
stream (begin, commit, cancel, …) stay with the bus: they are one step of the protocol.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import orjson
from redis.asyncio import Redis, RedisCluster

from deepagents.contract.codec import DamagedRecord
from deepagents.transport.keys import Keys, ShardKeys
from deepagents.transport.redis_streams.errors import redis_errors
from deepagents.transport.states import TERMINAL


class Location(NamedTuple):
    """Where a task was enqueued: its agent type, shard and tier (``da:loc:<task_id>``)."""

    agent: str
    shard: int
    tier: str


def encode_location(location: Location) -> str:
    return f"{location.agent}|{location.shard}|{location.tier}"


def decode_location(raw: bytes | str) -> Location:
    """A location record; ``DamagedRecord`` when it is not ``agent|shard|tier``."""
    try:
        text = raw.decode() if isinstance(raw, bytes) else raw
        agent, shard, tier = text.split("|")
        return Location(agent, int(shard), tier)
    except ValueError:  # UnicodeDecodeError too
        raise DamagedRecord("location", "the task's location record is damaged") from None


class IdempotencyClaim(NamedTuple):
    key: str  # the caller's idempotency key, as submitted
    tenant: str | None
    task_id: str
    fingerprint: str


@dataclass(frozen=True, slots=True)
class DeadLetterEntry:
    agent: str
    shard: int
    entry_id: str
    reason: str
    error: str
    deliveries: int
    dead_ms: int
    source: str
    task_id: str | None
    task_json: str | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# Releases an idempotency claim only while it still names the task that claimed it.
_RELEASE_IF_MINE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class TaskStore:
    """Uses the client it is given and never closes it."""

    def __init__(self, client: Redis | RedisCluster, keys: Keys) -> None:
        # redis-py types replies for str clients; ours speaks bytes (decode_responses=False).
        self.client: Any = client
        self.keys = keys
        self._release_if_mine = client.register_script(_RELEASE_IF_MINE)

    # location -----------------------------------------------------------------------------

    def location_record(self, task_id: str, location: Location) -> tuple[str, str]:
        """(key, value) of a task's location record, for callers that write it in a round
        trip of their own (``MessageBus.set_many``, the gateway's admission script)."""
        return self.keys.location(task_id), encode_location(location)

    async def location(self, task_id: str, *, what: str = "lookup") -> Location | None:
        with redis_errors(what):
            raw = await self.client.get(self.keys.location(task_id))
        return None if raw is None else decode_location(raw)

    # task hash ----------------------------------------------------------------------------

    async def task_fields(self, location: Location, task_id: str) -> dict[str, str]:
        """The whole task hash (state, owner, attempt, result, …), decoded; {} when gone."""
        key = self.keys.shard(location.agent, location.shard).task(task_id)
        with redis_errors("lookup"):
            raw = await self.client.hgetall(key)
        # Undecodable bytes read as U+FFFD: the field's own reader then finds it damaged.
        return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in raw.items()}

    async def terminal_result(self, agent: str, shard: int, task_id: str) -> bytes | None:
        """The task's result as stored, once the task is terminal; None before."""
        key = self.keys.shard(agent, shard).task(task_id)
        with redis_errors("read result"):
            state, raw = await self.client.hmget(key, ["state", "result"])
        if state is not None and state.decode() in TERMINAL and raw:
            return bytes(raw)
        return None

    async def expire(self, agent: str, shard: int, task_id: str, ttl_s: int) -> None:
        """The task hash and location record expire ``ttl_s`` from now, for tasks nobody
        looks up later (the gateway's health probes). Two commands, not a transaction: on
        a cluster the two keys live in different slots."""
        with redis_errors("expire task records"):
            pipe = self.client.pipeline(transaction=False)
            pipe.expire(self.keys.shard(agent, shard).task(task_id), ttl_s)
            pipe.expire(self.keys.location(task_id), ttl_s)
            await pipe.execute()

    # idempotency --------------------------------------------------------------------------

    async def claim_idempotency(
        self, claims: Sequence[IdempotencyClaim], ttl_s: int
    ) -> list[tuple[str, str] | None]:
        """Claim each key for its task (SET NX) and read who holds it, in one round trip.
        Returns per claim the holder's (task id, fingerprint); the fingerprint is "" for a
        record written before fingerprints existed; None: the record expired meanwhile."""
        with redis_errors("idempotency keys"):
            pipe = self.client.pipeline(transaction=False)
            for claim in claims:
                key = self.keys.idempotency(claim.key, claim.tenant)
                pipe.set(key, f"{claim.task_id} {claim.fingerprint}", nx=True, ex=ttl_s)
                pipe.get(key)
            replies = await pipe.execute()
        out: list[tuple[str, str] | None] = []
        for stored in replies[1::2]:
            if stored is None:
                out.append(None)
                continue
            owner, _, fingerprint = stored.decode().partition(" ")
            out.append((owner, fingerprint))
        return out

    async def release_idempotency(self, claims: Sequence[IdempotencyClaim]) -> None:
        """Delete each claim that still holds its own task (compare and delete: a claim a
        later submit took over stays): its submit was refused, nothing was enqueued, and a
        retry with the key must make the task anew."""
        if not claims:
            return
        # Side by side rather than in a pipeline: a script in a cluster pipeline is not
        # portable across redis-py versions, and this runs only when a submit is refused.
        with redis_errors("release idempotency keys"):
            await asyncio.gather(
                *(
                    self._release_if_mine(
                        keys=[self.keys.idempotency(c.key, c.tenant)],
                        args=[f"{c.task_id} {c.fingerprint}"],
                    )
                    for c in claims
                )
            )

    # gateway owner records ----------------------------------------------------------------

    def owner_key(self, task_id: str) -> str:
        return self.keys.owner(task_id)

    def owner_record(self, task_id: str, tenant: str) -> tuple[str, str]:
        return self.owner_key(task_id), tenant

    async def owner(self, task_id: str) -> str | None:
        with redis_errors("read task owner"):
            raw = await self.client.get(self.owner_key(task_id))
        return None if raw is None else str(raw.decode())

    async def owners(self, task_ids: Sequence[str]) -> list[str | None]:
        """``owner`` of each, in one round trip (a pipeline: the keys sit in many slots)."""
        if not task_ids:
            return []
        with redis_errors("read task owners"):
            pipe = self.client.pipeline(transaction=False)
            for task_id in task_ids:
                pipe.get(self.owner_key(task_id))
            raw = await pipe.execute()
        return [None if r is None else bytes(r).decode() for r in raw]

    async def adopt(self, records: Sequence[tuple[str, str]], ttl_s: int) -> None:
        """Write owner and location records (``owner_record``, ``location_record``) unless
        they exist (SET NX): the gateway's, for the tasks a tenant's idempotency keys led
        to (keys are scoped per tenant, so the tasks are its own), whatever became of the
        records of the submit that made them."""
        if not records:
            return
        with redis_errors("write task records"):
            pipe = self.client.pipeline(transaction=False)
            for key, value in records:
                pipe.set(key, value, nx=True, ex=ttl_s)
            await pipe.execute()

    async def forget_submitted(self, task_ids: Sequence[str]) -> None:
        """Remove the owner and location records of tasks that were not enqueued after all."""
        keys = [k for t in task_ids for k in (self.owner_key(t), self.keys.location(t))]
        if keys:
            with redis_errors("remove task records"):
                await self.client.delete(*keys)

    # dead letters -------------------------------------------------------------------------

    async def dead_letters(self, agent: str, keys: ShardKeys, limit: int) -> list[DeadLetterEntry]:
        with redis_errors("read dead letters"):
            entries = await self.client.xrange(keys.dlq, count=limit)
        return [dead_letter_entry(agent, keys.shard, eid, fields) for eid, fields in entries]

    async def dead_letter(
        self, agent: str, keys: ShardKeys, entry_id: str
    ) -> DeadLetterEntry | None:
        with redis_errors("read dead letters"):
            found = await self.client.xrange(keys.dlq, entry_id, entry_id)
        if not found:
            return None
        eid, fields = found[0]
        return dead_letter_entry(agent, keys.shard, eid, fields)

    async def purge_dead(self, keys: ShardKeys, entry_ids: Sequence[str] | None) -> int:
        """Delete these dead letters (all of the shard's when None); returns how many."""
        with redis_errors("purge dead letters"):
            if entry_ids:
                return int(await self.client.xdel(keys.dlq, *entry_ids))
            removed = int(await self.client.xlen(keys.dlq))
            await self.client.delete(keys.dlq)
            return removed


def _s(value: bytes | None) -> str:
    return value.decode(errors="replace") if value else ""


def dead_letter_entry(
    agent: str, shard: int, entry_id: bytes, fields: dict[bytes, bytes]
) -> DeadLetterEntry:
    raw = fields.get(b"orig_task")
    task_id = None
    if raw:
        try:
            task_id = str(orjson.loads(raw).get("task_id")) or None
        except (orjson.JSONDecodeError, AttributeError):
            task_id = None
    return DeadLetterEntry(
        agent=agent,
        shard=shard,
        entry_id=entry_id.decode(),
        reason=_s(fields.get(b"reason")),
        error=_s(fields.get(b"error")),
        deliveries=int(fields.get(b"deliveries") or 0),
        dead_ms=int(fields.get(b"dead_ms") or 0),
        source=_s(fields.get(b"source")),
        task_id=task_id,
        task_json=_s(raw) or None,
    )
