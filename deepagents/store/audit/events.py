"""Map one outbox event (a JSON object, see ``deepagents.contract.events``) to a table row.

Nothing here raises on bad input: a field of the wrong type becomes NULL, a missing event
id or time is derived from the outbox entry (deterministically, so a redelivery maps to
the same row), and every stored string goes through the redactor.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import orjson

from deepagents.store.audit.redact import Redactor

# Column order of COPY; the same order as the table (``written_at`` is left to its default).
COLUMNS = (
    "event_id", "ts", "type", "task_id", "trace_id", "span_id", "agent", "agent_version",
    "tenant", "intent", "tier", "shard", "attempt", "deliveries", "consumer", "status",
    "error_code", "error", "reason", "model", "latency_ms", "queue_ms", "tokens_used",
    "cost_usd", "input_hash", "payload", "output", "detail",
)  # fmt: skip
Row = tuple[Any, ...]

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_MAPPED = frozenset(
    {
        "event_id", "ts", "type", "task_id", "traceparent", "agent", "agent_version", "tenant",
        "intent", "tier", "shard", "attempt", "deliveries", "consumer", "error_code", "error",
        "reason", "model", "latency_ms", "queue_ms", "tokens_used", "cost_usd", "payload",
        "result",
    }
)  # fmt: skip
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_NAMESPACE = uuid.UUID("6f1c2a52-3c1e-4c59-9d0e-0b7d6e3b9a41")  # for derived event ids
_INT4, _INT8 = 2**31 - 1, 2**63 - 1
_SHORT = 256  # identifiers (agent, tenant, ...) are short; a long one is noise or abuse


def parse_traceparent(value: object) -> tuple[str | None, str | None]:
    """(trace_id, span_id) of a W3C ``traceparent``; (None, None) when absent or invalid."""
    if not isinstance(value, str):
        return None, None
    match = _TRACEPARENT.match(value.strip().lower())
    if not match or match.group(1) == "ff":
        return None, None
    trace_id, span_id = match.group(2), match.group(3)
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None, None
    return trace_id, span_id


def entry_time(entry_id: str) -> datetime:
    """The time a stream entry was added (the ms part of its id)."""
    ms = int(entry_id.split("-", 1)[0])
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def derived_id(source: str) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, source)


class RowMapper:
    def __init__(self, redactor: Redactor) -> None:
        self.r = redactor
        self._labels: dict[str, str | None] = {}  # agent, tier, tenant...: few distinct values

    def row(self, event: Mapping[str, Any], source: str, entry_id: str) -> Row:
        """``source`` names the outbox entry and index (``stream/entry#i``) for derived ids."""
        result = event.get("result")
        result = result if isinstance(result, Mapping) else {}
        metrics = result.get("metrics")
        metrics = metrics if isinstance(metrics, Mapping) else {}
        error = result.get("error")
        error = error if isinstance(error, Mapping) else {}
        trace_id, span_id = parse_traceparent(event.get("traceparent"))
        return (
            self._event_id(event.get("event_id"), source),
            self._ts(event.get("ts"), entry_id),
            self._label(event.get("type")) or "unknown",
            self._short(event.get("task_id")),
            trace_id,
            span_id,
            self._label(event.get("agent") or result.get("agent")),
            self._label(event.get("agent_version") or result.get("agent_version")),
            self._label(event.get("tenant")),
            self._label(event.get("intent")),
            self._label(event.get("tier")),
            _int(event.get("shard"), _INT4),
            _int(event.get("attempt"), _INT4),
            _int(event.get("deliveries") or metrics.get("attempts"), _INT4),
            self._label(event.get("consumer")),
            self._label(result.get("status") or event.get("outcome")),  # model_call: outcome
            self._label(event.get("error_code") or error.get("code")),
            self._text(event.get("error") or error.get("message")),
            self._text(event.get("reason")),
            self._label(event.get("model") or metrics.get("model")),
            _float(_first(event, metrics, "latency_ms") or event.get("total_ms")),
            _float(_first(event, metrics, "queue_ms")),
            _int(_first(event, metrics, "tokens_used") or _tokens(event)),
            _float(_first(event, metrics, "cost_usd")),
            self._input_hash(event),
            self._json(event.get("payload")),
            self._json(event.get("result")),
            self._json({k: v for k, v in event.items() if k not in _MAPPED} or None),
        )

    def unreadable(self, raw: bytes, source: str, entry_id: str, why: str) -> Row:
        """A row for an outbox entry that is not valid JSON: recorded, never dropped."""
        detail = {"source": source, "problem": why, "raw": raw.decode("utf-8", "replace")}
        row: list[Any] = [None] * len(COLUMNS)
        row[0], row[1], row[2] = derived_id(source), entry_time(entry_id), "unreadable"
        row[COLUMNS.index("detail")] = self._json(detail)
        return tuple(row)

    # fields -------------------------------------------------------------------------------

    @staticmethod
    def _event_id(value: object, source: str) -> uuid.UUID | str:
        # A canonical UUID string goes to asyncpg as is (parsing it costs more than the
        # regex); anything else gets an id derived from where it came from.
        if isinstance(value, str) and _UUID.match(value):
            return value
        return derived_id(source)

    @staticmethod
    def _ts(value: object, entry_id: str) -> datetime:
        if isinstance(value, str):
            try:
                ts = datetime.fromisoformat(value)
            except ValueError:
                return entry_time(entry_id)
            return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)
        return entry_time(entry_id)

    def _label(self, value: object) -> str | None:
        """``_short`` for fields with few distinct values, memoised."""
        if type(value) is not str:
            return self._short(value)
        try:
            return self._labels[value]
        except KeyError:
            clean = self._labels[value] = self._short(value)
            if len(self._labels) > 4_096:  # many distinct values: not labels after all
                self._labels.clear()
            return clean

    def _short(self, value: object) -> str | None:
        if type(value) is str and len(value) <= _SHORT and self.r.plain(value):
            return value  # the common case: a short clean identifier
        if value is None or isinstance(value, dict | list):
            return None
        return self.r.text(str(value), _SHORT)

    def _text(self, value: object) -> str | None:
        if value is None:
            return None
        return self.r.text(value if isinstance(value, str) else orjson.dumps(value).decode())

    def _json(self, value: object) -> str | None:
        if value is None:
            return None
        return self.r.snapshot_json(value).decode()

    def _input_hash(self, event: Mapping[str, Any]) -> str | None:
        """Hash of the input as submitted (before redaction): proves what was asked."""
        for key in ("payload", "prompt", "input"):
            if event.get(key) is not None:
                return str(self.r.fingerprint(event[key])["hash"])
        given = event.get("prompt_sha256") or event.get("input_hash")
        return self._short(given)


def _first(event: Mapping[str, Any], metrics: Mapping[str, Any], key: str) -> Any:
    value = event.get(key)
    return metrics.get(key) if value is None else value


def _tokens(event: Mapping[str, Any]) -> int | None:
    """A model_call event carries tokens in and out separately."""
    parts = [v for v in (event.get("tokens_in"), event.get("tokens_out")) if type(v) is int]
    return sum(parts) if parts else None


def _int(value: object, limit: int = _INT8) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if value != value or abs(value) > limit:  # NaN or out of the column's range
        return None
    return int(value)


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if number == number and abs(number) != float("inf") else None
