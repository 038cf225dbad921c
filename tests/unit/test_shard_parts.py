"""``submit_many``'s parts (``orchestrator/parts.py``): whole shards, the batch's order,
few and large enough to pay for their round trips."""

from __future__ import annotations

import random

from deepagents.orchestrator.parts import PART_MIN, PARTS_MAX, shard_parts


def _shards(n: int, shards: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [f"s{rng.randrange(shards)}" for _ in range(n)]


def _check(shards: list[str], parts: list[list[int]]) -> None:
    assert sorted(i for part in parts for i in part) == list(range(len(shards)))
    for part in parts:
        assert part == sorted(part)  # the batch's order within a part
    owner = {shards[i]: n for n, part in enumerate(parts) for i in part}
    for n, part in enumerate(parts):
        assert all(owner[shards[i]] == n for i in part)  # a shard in one part only


def test_a_small_batch_is_one_part() -> None:
    shards = _shards(2 * PART_MIN - 1, 8)
    assert shard_parts(shards) == [list(range(len(shards)))]
    assert shard_parts([]) == [[]]


def test_one_shard_is_one_part_however_large() -> None:
    assert shard_parts(["s0"] * 10 * PART_MIN) == [list(range(10 * PART_MIN))]


def test_a_large_batch_is_cut_into_whole_shards() -> None:
    shards = _shards(1000, 4)
    parts = shard_parts(shards)
    assert 2 <= len(parts) <= PARTS_MAX
    _check(shards, parts)


def test_many_shards_make_at_most_the_most_parts_each_large_enough() -> None:
    shards = _shards(20 * PART_MIN, 64)
    parts = shard_parts(shards)
    assert len(parts) == PARTS_MAX
    _check(shards, parts)
    assert all(len(part) >= PART_MIN for part in parts[:-1])
