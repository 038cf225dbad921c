"""Redaction and row mapping, without servers."""

from __future__ import annotations

import uuid

import orjson

from deepagents.contract.events import audit_event
from deepagents.store.audit.decode import BatchDecoder
from deepagents.store.audit.events import COLUMNS, parse_traceparent
from deepagents.store.audit.redact import REDACTED, RedactionPolicy, Redactor


def test_secret_keys_redacted_at_any_depth_and_metrics_kept() -> None:
    r = Redactor()
    value = {
        "api_key": "sk-abc", "nested": {"password": "p", "list": [{"Authorization": "Bearer x"}]},
        "X-Api-Key": "k", "access_token": "t", "client_secret": "s", "set-cookie": "c",
        "tokens_used": 12, "max_tokens": 100, "keyword": "fine",
    }  # fmt: skip
    out = r.redact(value)
    for path in (("api_key",), ("nested", "password"), ("X-Api-Key",), ("access_token",),
                 ("client_secret",), ("set-cookie",)):  # fmt: skip
        node = out
        for key in path:
            node = node[key]
        assert node == REDACTED, path
    assert out["nested"]["list"][0]["Authorization"] == REDACTED
    assert (out["tokens_used"], out["max_tokens"], out["keyword"]) == (12, 100, "fine")


def test_extra_keys_and_secret_looking_values() -> None:
    r = Redactor(RedactionPolicy().with_extra_keys(["ssn"]))
    out = r.redact({"user_ssn": "123", "note": "key sk-live-abcdefghijklmnopqrstu in text"})
    assert out["user_ssn"] == REDACTED
    assert "sk-live" not in out["note"] and REDACTED in out["note"]


def test_prompts_are_hashed_with_length_never_stored() -> None:
    prompt = "What is the meaning of life?"
    out = Redactor().redact({"prompt": prompt, "messages": [{"role": "user", "content": prompt}]})
    assert out["prompt"]["length"] == len(prompt)
    assert out["prompt"]["hash"].startswith("sha256:")
    assert prompt not in orjson.dumps(out).decode()
    keyed = Redactor(RedactionPolicy(hash_key=b"k1")).redact({"prompt": prompt})
    assert keyed["prompt"]["hash"].startswith("hmac-sha256:")
    assert keyed["prompt"]["hash"].split(":")[1] != out["prompt"]["hash"].split(":")[1]


def test_truncation_marker_and_snapshot_cap() -> None:
    r = Redactor(RedactionPolicy(max_string=100, max_snapshot_bytes=1_000))
    assert r.text("a" * 150) == "a" * 100 + "…[truncated 50 chars]"
    capped = r.snapshot({f"k{i}": "v" * 90 for i in range(50)})
    assert capped["_truncated"] is True and capped["bytes"] > 1_000
    assert len(orjson.dumps(capped)) < 1_000


def test_nul_and_lone_surrogates_become_replacement_characters() -> None:
    r = Redactor()
    assert r.text("a\x00b\ud800c") == "a\ufffdb\ufffdc"
    assert r.redact({"k\x00": ["\udfff"]}) == {"k\ufffd": ["\ufffd"]}


def test_traceparent_parsing() -> None:
    tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    assert parse_traceparent(f"00-{tid}-{sid}-01") == (tid, sid)
    assert parse_traceparent(f"00-{tid.upper()}-{sid}-01") == (tid, sid)
    for bad in (None, "", "garbage", f"ff-{tid}-{sid}-01", f"00-{'0' * 32}-{sid}-01", 42):
        assert parse_traceparent(bad) == (None, None)


def test_unreadable_and_odd_entries_become_rows_not_errors() -> None:
    decoder = BatchDecoder(Redactor())
    good = audit_event("submitted", "t1", payload={"x": 1}, shard="not-an-int", latency_ms="NaN")
    entries = [
        ("s", "1-0", {b"events": b"{not json"}),
        ("s", "2-0", {}),
        ("s", "3-0", {b"events": orjson.dumps([good, 5])}),
        ("s", "4-0", {b"events": b'[{"type": "failed", "task_id": "t\\u0000", "x": "\\ud800"}]'}),
    ]
    rows = [dict(zip(COLUMNS, row, strict=True)) for row in decoder.rows(entries)]
    assert [r["type"] for r in rows] == [
        "unreadable",
        "unreadable",
        "submitted",
        "unreadable",
        "failed",
    ]
    assert rows[2]["shard"] is None and rows[2]["latency_ms"] is None
    assert rows[4]["task_id"] == "t\ufffd" and "\ufffd" in rows[4]["detail"]
    again = [dict(zip(COLUMNS, row, strict=True)) for row in decoder.rows(entries)]
    assert [r["event_id"] for r in again] == [r["event_id"] for r in rows]  # deterministic
    assert isinstance(rows[0]["event_id"], uuid.UUID)


def test_an_event_that_cannot_be_mapped_is_kept_as_unreadable() -> None:
    big = b"123456789012345678901234567890"
    raw = b'[{"event_id": "x", "type": "succeeded", "payload": {"n": %s}}]' % big
    # orjson reads the big number as a float; the stdlib path (lone surrogate) keeps an int.
    raw_int = raw.replace(b'"event_id": "x"', b'"event_id": "x", "s": "\\ud800"')
    (row,) = BatchDecoder(Redactor()).rows([("s", "1-0", {b"events": raw_int})])
    assert row[COLUMNS.index("type")] == "unreadable"
    assert "64-bit" in row[COLUMNS.index("detail")]


def test_model_call_events_map_tokens_latency_outcome_and_prompt_hash() -> None:
    event = audit_event(
        "model_call", "t1", agent="research", model="gpt-x", attempt=1, outcome="ok",
        prompt_sha256="sha256:" + "ab" * 32, tokens_in=100, tokens_out=20, cost_usd=0.002,
        total_ms=850.5, requested_model="gpt-x",
    )  # fmt: skip
    (row,) = BatchDecoder(Redactor()).rows([("s", "1-0", {b"events": orjson.dumps([event])})])
    got = dict(zip(COLUMNS, row, strict=True))
    assert (got["model"], got["tokens_used"], got["cost_usd"]) == ("gpt-x", 120, 0.002)
    assert (got["latency_ms"], got["status"]) == (850.5, "ok")
    assert got["input_hash"] == "sha256:" + "ab" * 32
