"""Read side of the audit log: the queries behind ``deepagents audit ...``.

Every value reaches SQL as a parameter. The only varying SQL text is the ``--by``
grouping column, chosen from a fixed allow-list (a dict of constant fragments).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg
import orjson

from deepagents.store.audit.db import connect

_EVENT_COLS = (
    "event_id, ts, type, task_id, trace_id, span_id, agent, agent_version, tenant, intent, "
    "tier, shard, attempt, deliveries, consumer, status, error_code, error, reason, model, "
    "latency_ms, queue_ms, tokens_used, cost_usd, input_hash, payload, output, detail"
)
_SHOW = f"SELECT {_EVENT_COLS} FROM audit_log WHERE task_id = $1 ORDER BY ts, event_id"  # noqa: S608
_TRACE = f"SELECT {_EVENT_COLS} FROM audit_log WHERE trace_id = $1 ORDER BY ts, event_id"  # noqa: S608

# A task's cost and tokens are on its terminal events (the Result's metrics, the sum of its
# model calls); per model they are on the model_call events. Summing both would count
# every call twice, so each grouping reads one kind.
_TERMINAL = "type IN ('succeeded', 'failed', 'dead_lettered', 'dropped', 'expired')"
_COST = {
    "agent": ("coalesce(agent, '-')", _TERMINAL),
    "tenant": ("coalesce(tenant, '-')", _TERMINAL),
    "model": ("coalesce(model, '-')", "type = 'model_call'"),
}
COST_GROUPS = tuple(_COST)


def _cost_sql(by: str) -> str:
    key, kinds = _COST[by]
    return (
        f"SELECT {key} AS key, count(*) AS events, count(DISTINCT task_id) AS tasks, "  # noqa: S608 - allow-listed fragments
        "coalesce(sum(tokens_used), 0)::bigint AS tokens, "
        "coalesce(sum(cost_usd), 0)::float8 AS cost_usd "
        f"FROM audit_log WHERE ts >= $1 AND ts < $2 AND {kinds} "
        "GROUP BY 1 ORDER BY cost_usd DESC, key"
    )


class AuditRepository:
    """Owns one connection; use ``async with AuditRepository(url, schema) as repo``."""

    def __init__(self, url: str, schema: str) -> None:
        self.url = url
        self.schema = schema
        self._conn: asyncpg.Connection | None = None

    async def __aenter__(self) -> AuditRepository:
        self._conn = await connect(self.url, self.schema)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    @property
    def conn(self) -> asyncpg.Connection:
        if self._conn is None:
            raise RuntimeError("AuditRepository used outside `async with`")
        return self._conn

    async def task_events(self, task_id: str) -> list[dict[str, Any]]:
        return [_plain(r) for r in await self.conn.fetch(_SHOW, task_id)]

    async def trace_events(self, trace_id: str) -> list[dict[str, Any]]:
        return [_plain(r) for r in await self.conn.fetch(_TRACE, trace_id.lower())]

    async def cost(
        self, since: datetime, until: datetime, by: str = "agent"
    ) -> list[dict[str, Any]]:
        if by not in _COST:
            raise ValueError(f"cost grouping must be one of {', '.join(COST_GROUPS)}")
        return [dict(r) for r in await self.conn.fetch(_cost_sql(by), since, until)]


def _plain(record: asyncpg.Record) -> dict[str, Any]:
    out = dict(record)
    out["event_id"] = str(out["event_id"])
    for key in ("payload", "output", "detail"):
        if out[key] is not None:
            out[key] = orjson.loads(out[key])
    return out
