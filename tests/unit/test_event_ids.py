"""The worker's paired event ids are valid, distinct UUIDv7s ordered with the clock."""

from __future__ import annotations

import uuid

from deepagents._internal.ids import uuid7_str
from deepagents.worker.delivery import _uuid7_pair


def test_pair_is_two_distinct_uuid7() -> None:
    seen: set[str] = set()
    for _ in range(2000):
        for text in _uuid7_pair():
            value = uuid.UUID(text)
            assert str(value) == text
            assert value.version == 7
            assert value.variant == uuid.RFC_4122
            seen.add(text)
    assert len(seen) == 4000


def test_pair_shares_the_millisecond_prefix_of_uuid7_str() -> None:
    before = uuid7_str()
    first, second = _uuid7_pair()
    after = uuid7_str()
    # The first 48 bits are the Unix time in ms: the pair sits between ids made around it.
    assert before[:13] <= first[:13] == second[:13] <= after[:13]
