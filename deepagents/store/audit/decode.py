"""Outbox entries to table rows, and storing rows so that no event blocks the others.

An entry that is not valid JSON becomes one ``unreadable`` row (kept, never dropped). A
batch PostgreSQL refuses as data (not as an outage) is stored row by row; a row refused
on its own is stored stripped to its identity with the error, so a poison event can
never hold the outbox up in a retry loop (RELIABILITY row 33).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import asyncpg
import orjson

from deepagents.config import Settings
from deepagents.store.audit.events import COLUMNS, Row, RowMapper
from deepagents.store.audit.outbox import Entry
from deepagents.store.audit.redact import RedactionPolicy, Redactor
from deepagents.store.audit.sink import PgSink

log = logging.getLogger("deepagents.audit")
_DETAIL = COLUMNS.index("detail")
_KEEP = 3  # event_id, ts, type


class BatchDecoder:
    def __init__(self, redactor: Redactor) -> None:
        self.mapper = RowMapper(redactor)

    @classmethod
    def from_settings(cls, settings: Settings) -> BatchDecoder:
        key = (
            settings.audit_hash_key.get_secret_value().encode() if settings.audit_hash_key else None
        )
        policy = RedactionPolicy(
            max_string=settings.audit_max_string,
            max_snapshot_bytes=settings.audit_max_snapshot_bytes,
            hash_key=key,
        ).with_extra_keys(settings.audit_redact_keys.split(","))
        return cls(Redactor(policy))

    def rows(self, entries: list[Entry]) -> list[Row]:
        out: list[Row] = []
        for stream, entry_id, fields in entries:
            source = f"{stream}/{entry_id}"
            raw = fields.get(b"events", b"")
            events, problem = _decode(raw)
            if problem:
                out.append(self.mapper.unreadable(raw, source, entry_id, problem))
                continue
            out.extend(self._row(e, f"{source}#{i}", entry_id) for i, e in enumerate(events))
        return out

    def _row(self, event: Any, source: str, entry_id: str) -> Row:
        """Never raises: whatever cannot be mapped is kept as an ``unreadable`` row."""
        problem = "event is not a JSON object"
        if isinstance(event, dict):
            try:
                return self.mapper.row(event, source, entry_id)
            except (TypeError, ValueError, OverflowError) as exc:  # e.g. a >64-bit integer
                problem = f"cannot map event: {type(exc).__name__}: {exc}"
        raw = json.dumps(event, default=str).encode()
        return self.mapper.unreadable(raw, source, entry_id, problem)

    async def store(self, sink: PgSink, rows: list[Row]) -> int:
        """Write ``rows``; AuditUnavailable propagates (retry), data errors do not."""
        try:
            return await sink.write(rows)
        except asyncpg.PostgresError as exc:
            log.error("audit batch refused (%s); storing its %d rows one by one", exc, len(rows))
        stored = 0
        for row in rows:
            try:
                stored += await sink.write([row])
            except asyncpg.PostgresError as exc:
                stored += await sink.write([_stripped(row, exc)])
        return stored


def _decode(raw: bytes) -> tuple[list[Any], str]:
    if not raw:
        return [], "outbox entry has no events field"
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        # orjson refuses lone surrogates ("\ud800"); the stdlib reads them and the
        # redactor then replaces them with U+FFFD.
        try:
            data = json.loads(raw.decode("utf-8", "replace"))
        except ValueError as exc:
            return [], f"not JSON: {exc}"
    if not isinstance(data, list):
        return [], "events is not a JSON array"
    return data, ""


def _stripped(row: Row, exc: BaseException) -> Row:
    detail = orjson.dumps({"unstorable": f"{type(exc).__name__}: {exc}"[:1000]}).decode()
    out: list[Any] = [*row[:_KEEP], *([None] * (len(COLUMNS) - _KEEP))]
    out[_DETAIL] = detail
    return tuple(out)
