"""The record of a waiting task's question (key ``ShardKeys.question``), as both buses
write it: the task's JSON, a newline, then ``{"question", "schema", "default"}`` as JSON.
The scripts cut the task at the first newline (JSON text never holds a raw one) to
re-enqueue it exactly as it was, with no JSON decoding in Lua."""

from __future__ import annotations

import orjson


def encode_question(
    task_json: bytes, question: str, schema_json: bytes, default_json: bytes
) -> bytes:
    meta = orjson.dumps(
        {
            "question": question,
            "schema": orjson.Fragment(schema_json or b"{}"),
            "default": orjson.Fragment(default_json) if default_json else None,
        }
    )
    return task_json + b"\n" + meta


def tenant_of(task_json: bytes) -> str | None:
    """The task's tenant, whose waiting index it is listed in too; None without one."""
    try:
        tenant = orjson.loads(task_json).get("tenant")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return tenant if isinstance(tenant, str) and tenant else None


def task_of(record: bytes) -> bytes:
    return record.partition(b"\n")[0]


def decode_question(record: bytes | None) -> dict[str, str]:
    """The question's fields as strings (``question``, ``ask_schema``, ``ask_default``); {}
    when there is no record, or it is damaged."""
    if not record:
        return {}
    try:
        meta = orjson.loads(record.partition(b"\n")[2])
    except orjson.JSONDecodeError:
        return {}
    if not isinstance(meta, dict):
        return {}
    default = meta.get("default")
    return {
        "question": str(meta.get("question", "")),
        "ask_schema": orjson.dumps(meta.get("schema") or {}).decode(),
        "ask_default": "" if default is None else orjson.dumps(default).decode(),
    }
