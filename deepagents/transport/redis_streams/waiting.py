"""The Redis bus's operations for tasks waiting on a person: park, answer, wake, and the
reads of questions and answers. Each change is one script on the shard's slot
(``lua/park.lua``, ``answer.lua``, ``wake.lua``); every key it touches is in its KEYS."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from deepagents.contract.events import AuditEvent
from deepagents.telemetry import process_telemetry
from deepagents.transport.base import (
    Answered,
    AskRecord,
    Park,
    StreamRef,
    Waiting,
    WaitingCursor,
    Woken,
    now_ms,
)
from deepagents.transport.keys import ShardKeys
from deepagents.transport.outbox import encode_events
from deepagents.transport.questions import decode_question, encode_question, tenant_of
from deepagents.transport.redis_streams.errors import redis_errors
from deepagents.transport.redis_streams.scripts import Scripts
from deepagents.transport.states import AnswerStatus, Outcome, TaskState, WakeStatus, decoder

_LISTED = (b"ask", b"wait_due_ms", b"on_timeout")
_OUTCOME = decoder(Outcome)
_ANSWER = decoder(AnswerStatus)
_WAKE = decoder(WakeStatus)
_STATE = decoder(TaskState)

log = logging.getLogger(__name__)


def _s(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else value


def _readable(keys: ShardKeys, ids: Sequence[tuple[Any, float]]) -> list[tuple[Any, float]]:
    out = []
    for task_id, asked in ids:
        try:
            out.append((_s(task_id), asked))
        except UnicodeDecodeError:
            metrics = process_telemetry().metrics
            if metrics is not None:
                metrics.decode_errors.labels(keys.agent, "waiting").inc()
            log.warning("skipped a damaged member of %s (not UTF-8)", keys.waiting)
    return out


def _task_keys(keys: ShardKeys, task_id: str, tiers: Sequence[str]) -> list[str]:
    return [
        keys.task(task_id),
        keys.steps(task_id),
        keys.delayed,
        keys.waiting,
        keys.outbox,
        keys.question(task_id),
        *(keys.stream(t) for t in tiers),
    ]


class RedisWaiting:
    """Mixed into ``RedisStreamBus`` (its ``client`` and ``scripts``)."""

    client: Any
    scripts: Scripts

    async def park(self, stream: StreamRef, group: str, consumer: str, item: Park) -> Outcome:
        keys = stream.keys
        touched = [
            stream.name,
            keys.task(item.task_id),
            keys.delayed,
            keys.waiting,
            keys.outbox,
            keys.question(item.task_id),
        ]
        tenant = tenant_of(item.task_json)
        if tenant is not None:
            touched.append(keys.tenant_waiting(tenant))
        record = encode_question(item.task_json, item.question, item.schema_json, item.default_json)
        with redis_errors(f"park on {stream.name}"):
            status = await self.scripts.park(
                keys=touched,
                args=[
                    group,
                    consumer,
                    item.entry_id,
                    item.task_id,
                    record,
                    item.tier,
                    item.ask,
                    item.on_timeout,
                    now_ms(),
                    item.due_ms,
                    encode_events(item.events),
                    keys.version,
                ],
            )
        return _OUTCOME[status]

    async def answer(
        self,
        keys: ShardKeys,
        tiers: Sequence[str],
        task_id: str,
        ask: str,
        answer_json: bytes,
        events: Sequence[AuditEvent],
    ) -> Answered:
        with redis_errors("reply"):
            status, state, asked = await self.scripts.answer(
                keys=_task_keys(keys, task_id, tiers),
                args=[task_id, ask, answer_json, now_ms(), encode_events(events), *tiers],
            )
        return Answered(_ANSWER[status], _STATE.get(state) or _s(state), int(asked or 0))

    async def wake(
        self, keys: ShardKeys, tiers: Sequence[str], task_id: str, events: Sequence[AuditEvent]
    ) -> Woken:
        with redis_errors(f"wake a waiting task of {keys.delayed}"):
            status, asked, *children = await self.scripts.wake(
                keys=_task_keys(keys, task_id, tiers),
                args=[task_id, now_ms(), encode_events(events), *tiers],
            )
        awaited = tuple(_s(children[0]).split()) if children else ()
        return Woken(_WAKE[status], int(asked or 0), awaited)

    async def ask_record(self, keys: ShardKeys, task_id: str, ask: str) -> AskRecord:
        with redis_errors("read an answer"):
            answer, timeouts = await self.client.hmget(
                keys.steps(task_id), f"ask:{ask}", f"ask:{ask}:timeouts"
            )
        return AskRecord(answer, int(timeouts or 0))

    async def waiting(
        self, keys: ShardKeys, limit: int, tenant: str | None = None
    ) -> list[Waiting]:
        return await self.waiting_of(keys, await self.waiting_ids(keys, limit, tenant))

    async def waiting_ids(
        self,
        keys: ShardKeys,
        limit: int,
        tenant: str | None = None,
        *,
        after: WaitingCursor | None = None,
        newest: bool = False,
    ) -> list[tuple[str, float]]:
        if tenant is None and after is None and not newest:
            with redis_errors("list waiting tasks"):
                ids = await self.client.zrange(keys.waiting, 0, limit - 1, withscores=True)
            return _readable(keys, ids)
        listed = keys.waiting if tenant is None else keys.tenant_waiting(tenant)
        cursor = ["", ""] if after is None else [after.asked_ms, after.task_id]
        with redis_errors("list a tenant's waiting tasks"):
            flat = await self.scripts.tenant_waiting(
                keys=[listed, keys.waiting],
                args=[limit, "desc" if newest else "asc", *cursor],
            )
        return _readable(keys, list(zip(flat[::2], map(float, flat[1::2]), strict=True)))

    async def waiting_of(self, keys: ShardKeys, ids: Sequence[tuple[str, float]]) -> list[Waiting]:
        """The open questions of these (task id, asked at) pairs, in their order (a task
        that stopped waiting meanwhile is left out)."""
        with redis_errors("list waiting tasks"):
            pipe = self.client.pipeline(transaction=False)
            for task_id, _ in ids:
                pipe.hmget(keys.task(_s(task_id)), *_LISTED)
                pipe.get(keys.question(_s(task_id)))
            rows = await pipe.execute() if ids else []
        out = []
        for (task_id, asked), (ask, due, policy), record in zip(
            ids, rows[::2], rows[1::2], strict=True
        ):
            if ask is None or record is None:  # ended between the two reads
                continue
            question = decode_question(record).get("question", "")
            out.append(
                Waiting(
                    _s(task_id),
                    keys.agent,
                    keys.shard,
                    int(asked),
                    _s(ask),
                    question,
                    int(due or 0),
                    _s(policy),
                )
            )
        return out

    async def asked(self, keys: ShardKeys, task_id: str) -> dict[str, str]:
        with redis_errors("read a question"):
            record = await self.client.get(keys.question(task_id))
        return decode_question(record)

    async def waiting_count(
        self, shards: Sequence[ShardKeys], tenant: str | None = None
    ) -> list[int]:
        with redis_errors("count waiting tasks"):
            pipe = self.client.pipeline(transaction=False)
            for keys in shards:
                pipe.zcard(keys.waiting if tenant is None else keys.tenant_waiting(tenant))
            counts = await pipe.execute()
        return [int(n) for n in counts]
