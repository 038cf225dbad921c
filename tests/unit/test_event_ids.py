"""Audit event ids are valid, distinct UUIDv7s ordered with the clock."""

from __future__ import annotations

import time
import uuid

from deepagents._internal.ids import uuid7_str


def test_ids_are_distinct_uuid7() -> None:
    seen: set[str] = set()
    for _ in range(4000):
        text = uuid7_str()
        value = uuid.UUID(text)
        assert str(value) == text
        assert value.version == 7
        assert value.variant == uuid.RFC_4122
        seen.add(text)
    assert len(seen) == 4000


def test_ids_carry_the_millisecond_clock() -> None:
    before = time.time_ns() // 1_000_000
    value = uuid.UUID(uuid7_str())
    after = time.time_ns() // 1_000_000
    # The first 48 bits are the Unix time in ms.
    assert before <= value.int >> 80 <= after
