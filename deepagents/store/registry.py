"""The agent registry in Redis: which agent types run, their versions, intents and instances.

Readers (the gateway's ``GET /v1/agents``, health for routing and status) never fail on a
malformed field: it is moved to the agent's dead-letter stream (shard 0's, reason
``decode_error``, the value kept as ``orig_value``), counted, and read as absent. Workers
write every field again when they register.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

import orjson
from redis.asyncio import Redis

from deepagents.config.placement import Placement
from deepagents.contract.agent import AgentContract
from deepagents.errors import ErrorCode
from deepagents.telemetry.core import process_telemetry
from deepagents.telemetry.metrics import Metrics
from deepagents.transport.keys import Keys
from deepagents.transport.redis_streams.errors import redis_errors

log = logging.getLogger("deepagents.registry")

# An instance whose heartbeat is older than this is dropped from the registry by readers of
# health: a worker killed with -9 never deregisters.
FORGET_MS = 600_000
# Delete a hash field only if it still holds the malformed value that was read: a worker
# that registered meanwhile wrote a good one, which must stay.
_DELETE_IF_SAME = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
"""


# How much of a failed health check's reason the registry keeps.
DETAIL_CHARS = 300


@dataclass(frozen=True, slots=True)
class DeadInstance:
    """An instance whose heartbeat lapsed, until the registry forgets it (``FORGET_MS``)."""

    instance: str
    since_ms: int  # its last heartbeat: dead since then


@dataclass(frozen=True, slots=True)
class AgentHealth:
    """One agent type as its instances last reported: fresh (live) = heartbeat within
    ``stale_ms``; healthy = fresh and its last ``health_check()`` passed; ``dead``: the
    instances whose heartbeat lapsed, not yet forgotten. ``instances`` counts both.
    ``detail``: why a fresh instance's last check failed (a remote service down: its error);
    ``circuit``: the state of the fleet's circuit breaker of a remote agent's service (None:
    it has none, or never opened)."""

    agent: str
    instances: int
    fresh: int
    healthy: int
    detail: str = ""
    circuit: str | None = None
    dead: tuple[DeadInstance, ...] = ()

    @property
    def ratio(self) -> float:
        """Healthy among the live instances: a dead one (killed, out of memory) leaves the
        ratio when its heartbeat lapses; an agent with none live is at 0."""
        return self.healthy / self.fresh if self.fresh else 0.0

    @property
    def ok(self) -> bool:
        return self.healthy > 0


class AgentRegistry:
    def __init__(self, client: Redis, keys: Keys, metrics: Metrics | None = None) -> None:
        self.client: Any = client  # replies are bytes (decode_responses=False)
        self.keys = keys
        self.metrics = metrics if metrics is not None else process_telemetry().metrics
        self._delete_if_same = client.register_script(_DELETE_IF_SAME)

    async def register(self, agent: AgentContract, instance: str) -> None:
        now = int(time.time() * 1000)
        with redis_errors("register agent"):
            pipe = self.client.pipeline(transaction=False)
            pipe.hset(
                self.keys.agent(agent.name),
                mapping={
                    "version": agent.version,
                    "intents": orjson.dumps(list(agent.intents)),
                    "updated_ms": now,
                },
            )
            pipe.sadd(self.keys.agents_index, agent.name)
            pipe.hset(self.keys.agent_instances(agent.name), instance, now)
            # Which version each instance runs: a rollout routes only to live versions.
            pipe.hset(self.keys.agent_versions(agent.name), instance, agent.version)
            await pipe.execute()

    async def beat(self, agent: AgentContract, instance: str) -> None:
        with redis_errors("heartbeat"):
            pipe = self.client.pipeline(transaction=False)
            pipe.hset(self.keys.agent_instances(agent.name), instance, int(time.time() * 1000))
            # Again each beat: a Redis that lost its data must not leave a live worker
            # without a version (its version would get no tasks under a rollout).
            pipe.hset(self.keys.agent_versions(agent.name), instance, agent.version)
            await pipe.execute()

    async def last_beats(self, agent: str) -> dict[str, int]:
        with redis_errors("read heartbeats"):
            raw = await self.client.hgetall(self.keys.agent_instances(agent))
        return await self._beats(agent, raw)

    async def deregister(self, agent: AgentContract, instance: str) -> None:
        # Best effort on the way out: a stale instance entry ages out by its timestamp.
        with contextlib.suppress(Exception):
            pipe = self.client.pipeline(transaction=False)
            pipe.hdel(self.keys.agent_instances(agent.name), instance)
            pipe.hdel(self._health_key(agent.name), instance)
            pipe.hdel(self.keys.agent_reads(agent.name), instance)
            pipe.hdel(self.keys.agent_versions(agent.name), instance)
            await pipe.execute()

    async def record_reads(self, agent: str, instance: str, placement: Placement) -> None:
        """The tiers and shards this instance reads, for ``live_reads``."""
        with redis_errors("record what a worker reads"):
            await self.client.hset(
                self.keys.agent_reads(agent), instance, orjson.dumps(placement.as_json())
            )

    async def live_reads(
        self, agent: str, *, stale_ms: int, everything: Placement
    ) -> dict[str, Placement]:
        """What each live instance (heartbeat within ``stale_ms``) reads. An instance that
        recorded nothing (a worker older than placement) reads ``everything``; a malformed
        record is moved aside and read as nothing, so the gap shows rather than hides."""
        with redis_errors("read what workers read"):
            pipe = self.client.pipeline(transaction=False)
            pipe.hgetall(self.keys.agent_instances(agent))
            pipe.hgetall(self.keys.agent_reads(agent))
            beats_raw, reads_raw = await pipe.execute()
        now = int(time.time() * 1000)
        beats = await self._beats(agent, beats_raw)
        out: dict[str, Placement] = {}
        for instance, ms in beats.items():
            if now - ms > stale_ms:
                continue
            raw = reads_raw.get(instance.encode())
            placement = everything if raw is None else _placement(raw)
            if placement is None:
                key = self.keys.agent_reads(agent)
                await self._move_aside(agent, key, instance.encode(), raw, "not a placement")
                placement = Placement((), ())
            out[instance] = placement
        return out

    def _health_key(self, name: str) -> str:
        return f"{self.keys.agent(name)}:health"

    async def record_health(self, agent: str, instance: str, ok: bool, detail: str = "") -> None:
        """The result of one ``health_check()`` of one instance: ``"1|<ms>"``, or
        ``"0|<ms>|<why>"`` (the reason's first ``DETAIL_CHARS`` characters)."""
        value = f"{1 if ok else 0}|{int(time.time() * 1000)}"
        if not ok and detail:
            value += f"|{detail[:DETAIL_CHARS]}"
        with redis_errors("record agent health"):
            await self.client.hset(self._health_key(agent), instance, value)

    async def health(
        self, names: list[str] | None = None, *, stale_ms: int, forget_ms: int = FORGET_MS
    ) -> dict[str, AgentHealth]:
        """Health per agent type (all registered ones when ``names`` is None). Instances
        silent for longer than ``forget_ms`` are removed on the way."""
        with redis_errors("read agent health"):
            if names is None:
                names = sorted(
                    n.decode() for n in await self.client.smembers(self.keys.agents_index)
                )
            pipe = self.client.pipeline(transaction=False)
            for name in names:
                pipe.hgetall(self.keys.agent_instances(name))
                pipe.hgetall(self._health_key(name))
                pipe.hget(self.keys.remote_breaker(name), "state")
            replies = await pipe.execute()
        now = int(time.time() * 1000)
        out: dict[str, AgentHealth] = {}
        for i, name in enumerate(names):
            beats = await self._beats(name, replies[3 * i])
            checks = {_text(k): _text(v) for k, v in replies[3 * i + 1].items()}
            circuit = replies[3 * i + 2]
            gone = [inst for inst, ms in beats.items() if now - ms > forget_ms]
            if gone:
                await self._forget(name, gone)
            live = {inst: ms for inst, ms in beats.items() if inst not in gone}
            fresh = [inst for inst, ms in live.items() if now - ms <= stale_ms]
            healthy = [inst for inst in fresh if checks.get(inst, "0").startswith("1|")]
            why = next((_reason(checks[i]) for i in fresh if _reason(checks.get(i, ""))), "")
            dead = [DeadInstance(i, ms) for i, ms in sorted(live.items()) if i not in fresh]
            out[name] = AgentHealth(
                name,
                len(live),
                len(fresh),
                len(healthy),
                why,
                _text(circuit) if circuit is not None else None,
                tuple(dead),
            )
        return out

    async def _forget(self, name: str, instances: list[str]) -> None:
        with redis_errors("forget agent instances"):
            pipe = self.client.pipeline(transaction=False)
            pipe.hdel(self.keys.agent_instances(name), *instances)
            pipe.hdel(self._health_key(name), *instances)
            pipe.hdel(self.keys.agent_reads(name), *instances)
            pipe.hdel(self.keys.agent_versions(name), *instances)
            await pipe.execute()

    async def agents(self, *, what: str = "list agents") -> dict[str, dict[str, object]]:
        with redis_errors(what):
            return await self._agents()

    async def _agents(self) -> dict[str, dict[str, object]]:
        names = sorted(_text(n) for n in await self.client.smembers(self.keys.agents_index))
        out: dict[str, dict[str, object]] = {}
        for name in names:
            info = await self.client.hgetall(self.keys.agent(name))
            instances = await self.client.hgetall(self.keys.agent_instances(name))
            out[name] = {
                **await self._description(name, info),
                "instances": await self._beats(name, instances),
            }
        return out

    async def _description(self, name: str, info: dict[bytes, bytes]) -> dict[str, object]:
        """Version and intents of an agent's hash; a malformed one is moved aside."""
        key = self.keys.agent(name)
        version = info.get(b"version", b"")
        if not _is_text(version):
            await self._move_aside(name, key, b"version", version, "not UTF-8")
            version = b""
        intents = _intents(info.get(b"intents", b"[]"))
        if isinstance(intents, str):
            await self._move_aside(name, key, b"intents", info[b"intents"], intents)
            intents = []
        return {"version": version.decode(), "intents": intents}

    async def _beats(self, name: str, raw: dict[bytes, bytes]) -> dict[str, int]:
        """An instances hash as instance -> last heartbeat ms; a value that is not a
        timestamp is moved aside."""
        beats: dict[str, int] = {}
        for instance, value in raw.items():
            if value.isdigit():
                beats[_text(instance)] = int(value)
            else:
                key = self.keys.agent_instances(name)
                await self._move_aside(name, key, instance, value, "heartbeat is not a number")
        return beats

    async def _move_aside(
        self, name: str, key: str, field: bytes, value: bytes, error: str
    ) -> None:
        """Record a malformed field in the agent's dead-letter stream, then delete it from
        the registry (unless a worker rewrote it meanwhile). Recorded first: a crash in
        between leaves it to be moved again, never lost."""
        dlq = self.keys.shard(name, 0).dlq
        record = {
            "source": key,
            "field": field,
            "reason": ErrorCode.DECODE_ERROR,
            "error": error,
            "dead_ms": int(time.time() * 1000),
            "deliveries": 0,
            "orig_value": value,
        }
        with redis_errors("move a malformed registry field aside"):
            await self.client.xadd(dlq, record)
            await self._delete_if_same(keys=[key], args=[field, value])
        if self.metrics is not None:
            self.metrics.decode_errors.labels(name, "registry").inc()
        log.warning(
            "moved the malformed field %s of %s to %s: %s",
            _text(field),
            key,
            dlq,
            error,
            extra={"action": "dead_lettered", "reason": "decode_error", "agent": name},
        )


def _reason(check: str) -> str:
    """The reason a ``"0|<ms>|<why>"`` health record gives; "" for a passed check."""
    ok, _, rest = check.partition("|")
    return rest.partition("|")[2] if ok == "0" else ""


def _text(raw: bytes) -> str:
    return raw.decode(errors="replace")


def _is_text(raw: bytes) -> bool:
    try:
        raw.decode()
    except UnicodeDecodeError:
        return False
    return True


def _placement(raw: bytes) -> Placement | None:
    try:
        value = orjson.loads(raw)
        tiers, shards = value["tiers"], value["shards"]
    except (orjson.JSONDecodeError, TypeError, KeyError):
        return None
    if not all(isinstance(t, str) for t in tiers) or not all(
        isinstance(s, int) and not isinstance(s, bool) for s in shards
    ):
        return None
    return Placement(tuple(tiers), tuple(shards))


def _intents(raw: bytes) -> list[str] | str:
    """The intents field as a list of names, or why it is not one."""
    try:
        intents = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return f"not JSON: {exc}"
    if not isinstance(intents, list) or not all(isinstance(i, str) for i in intents):
        return "not a JSON list of strings"
    return intents
