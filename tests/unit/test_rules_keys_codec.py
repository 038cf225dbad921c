"""Pure pieces: the rule language, the key layout, the wire codec, retry decisions."""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from deepagents.config.rules import RuleError, compile_match
from deepagents.config.schema import RetryPolicy
from deepagents.contract import Task
from deepagents.contract.codec import DecodeError, Envelope, encode_task
from deepagents.errors import InvalidInput, RetryableError
from deepagents.transport.entries import decode_envelope, decode_envelopes
from deepagents.transport.keys import Keys, shard_of
from deepagents.worker.retry import backoff_ms, decide


def task(**payload: object) -> Task:
    return Task(intent="trade", payload=payload, tenant="acme", priority=1)


@pytest.mark.parametrize(
    ("match", "expected"),
    [
        ({"intent": "trade"}, True),
        ({"intent": "other"}, False),
        ({"payload.urgent": True}, True),
        ({"payload.qty": {"gte": 100}}, True),
        ({"payload.qty": {"gt": 100}}, False),
        ({"payload.qty": {"lt": "x"}}, False),  # no ordering across types
        ({"tenant": {"in": ["acme", "globex"]}}, True),
        ({"tenant": {"not_in": ["acme"]}}, False),
        ({"payload.missing": {"exists": False}}, True),
        ({"payload.nested.deep": 1}, True),
        ({"payload.nested.deep.deeper": 1}, False),
        ({"payload.urgent": {"ne": True}}, False),
        ({"priority": {"lte": 1}, "intent": "trade"}, True),
    ],
)
def test_rules(match: dict[str, object], expected: bool) -> None:
    t = task(urgent=True, qty=100, nested={"deep": 1})
    assert compile_match(match)(t) is expected


@pytest.mark.parametrize(
    "match",
    [
        {},
        {"payload": 1},
        {"os.system": 1},
        {"payload.x": {"eq": [1]}},
        {"payload.x": {"in": 1}},
        {"payload.x": {"gt": True}},
        {"payload.x": {"a": 1, "b": 2}},
        {"payload." + ".".join("a" * 9): 1},
    ],
)
def test_bad_rules_are_refused(match: dict[str, object]) -> None:
    with pytest.raises(RuleError):
        compile_match(match)


_FIRST = "abcdefghijklmnopqrstuvwxyz0123456789"


@given(
    # Agent names as the config allows them ([a-z0-9][a-z0-9_-]{0,20}), built without
    # from_regex: its lazy import, mid-run, can hit CPython 3.11.7's "AST constructor
    # recursion depth mismatch" (fixed in 3.11.8) in pytest's assertion rewriter.
    agent=st.builds(
        str.__add__,
        st.sampled_from(_FIRST),
        st.text(alphabet=_FIRST + "_-", max_size=20),
    ),
    shard=st.integers(0, 1023),
    task_id=st.uuids().map(str),
)
def test_every_key_of_a_shard_is_in_one_hash_slot(agent: str, shard: int, task_id: str) -> None:
    keys = Keys("da").shard(agent, shard)
    slots = {
        key_slot(k.encode())
        for k in (
            keys.stream("p0"),
            keys.stream("p2"),
            keys.delayed,
            keys.dlq,
            keys.outbox,
            keys.task(task_id),
        )
    }
    assert len(slots) == 1


def test_shards_spread_and_are_stable() -> None:
    ids = [str(i) for i in range(4000)]
    counts = [0] * 4
    for i in ids:
        counts[shard_of(i, 4)] += 1
    assert min(counts) > 800
    assert shard_of("01a229ed-1211-7b2c-81c9-295ba6bbf2ec", 4) == shard_of(
        "01a229ed-1211-7b2c-81c9-295ba6bbf2ec", 4
    )


def test_idempotency_keys_are_hashed_and_tenant_scoped() -> None:
    keys = Keys("da")
    k = keys.idempotency("{evil}:key", "acme")
    assert "{" not in k and k.startswith("da:idem:")
    assert keys.idempotency("k", "acme") != keys.idempotency("k", "globex")


def test_codec_round_trip_and_errors() -> None:
    t = task(x=1)
    fields = {b"task": encode_task(t), b"attempt": b"2", b"enq": b"5", b"reply": b"ch"}
    env = decode_envelope(fields)
    assert env.task == t and env.attempt == 2 and env.reply == "ch"
    bad = [
        None,
        {},
        {b"task": b"{", b"attempt": b"1", b"enq": b"0"},
        {b"task": b'{"intent": "x", "payload": 1}', b"attempt": b"1", b"enq": b"0"},
        {b"task": encode_task(t), b"attempt": b"zero", b"enq": b"0"},
        {b"task": encode_task(t), b"attempt": b"0", b"enq": b"0"},
        {b"task": b'{"intent": "x", "payload": {"a": NaN}}', b"attempt": b"1", b"enq": b"0"},
        {b"task": orjson.dumps({"intent": "x", "evil": 1}), b"attempt": b"1", b"enq": b"0"},
    ]
    for fields_ in bad:
        with pytest.raises(DecodeError):
            decode_envelope(fields_)


def _entry(t: Task, attempt: bytes = b"1") -> dict[bytes, bytes]:
    return {b"task": encode_task(t), b"attempt": attempt, b"enq": b"5", b"reply": b"ch"}


def test_a_batch_decodes_as_its_entries_do() -> None:
    batch = [_entry(task(i=i), attempt=b"%d" % (i + 1)) for i in range(30)]
    assert decode_envelopes(batch) == [decode_envelope(fields) for fields in batch]


@given(st.lists(st.sampled_from(range(8)), min_size=1, max_size=12))
def test_a_batch_with_bad_entries_names_each_of_them(kinds: list[int]) -> None:
    """Whatever mix of good and bad entries: every error lands on its own entry, and every
    good entry still decodes (validating the batch at once must not shift anything)."""
    good_task = task(ok=True)
    two_tasks = encode_task(task(a=1)) + b"," + encode_task(task(b=2))
    makers: list[Callable[[], dict[bytes, bytes] | None]] = [
        lambda: _entry(good_task),
        lambda: None,
        lambda: {b"task": b"{", b"attempt": b"1", b"enq": b"0"},
        lambda: {b"task": b'{"intent": "x", "payload": 1}', b"attempt": b"1", b"enq": b"0"},
        lambda: _entry(good_task, attempt=b"0"),
        lambda: {b"attempt": b"1", b"enq": b"0"},
        lambda: {b"task": two_tasks, b"attempt": b"1", b"enq": b"0"},  # not one task
        lambda: _entry(good_task, attempt=b"two"),
    ]
    batch = [makers[k]() for k in kinds]
    decoded = decode_envelopes(batch)
    assert len(decoded) == len(batch)
    for k, out in zip(kinds, decoded, strict=True):
        if k == 0:
            assert isinstance(out, Envelope) and out.task == good_task
        else:
            assert isinstance(out, DecodeError)


def test_backoff_grows_with_jitter_and_caps() -> None:
    policy = RetryPolicy(base_ms=100, max_ms=1000, multiplier=2)
    rng = random.Random(1)
    assert [
        backoff_ms(policy.model_copy(update={"jitter": False}), a) for a in (1, 2, 3, 4, 5)
    ] == [100, 200, 400, 800, 1000]
    for attempt in range(1, 8):
        ceiling = min(1000, 100 * 2 ** (attempt - 1))
        assert ceiling / 2 <= backoff_ms(policy, attempt, rng) <= ceiling


def test_decide() -> None:
    policy = RetryPolicy()
    common = partial(decide, max_deliveries=3, policy=policy, time_left_ms=None)
    assert common(RuntimeError("x"), deliveries=1).action == "retry"
    assert common(RetryableError("x"), deliveries=2).action == "retry"
    assert common(RuntimeError("x"), deliveries=3).action == "dead_letter"
    assert common(InvalidInput("x"), deliveries=1).action == "fail"
    late = decide(RuntimeError("x"), deliveries=1, max_deliveries=3, policy=policy, time_left_ms=1)
    assert (late.action, late.code) == ("fail", "deadline_exceeded")
