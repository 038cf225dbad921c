"""Fast UUIDv7 strings for hot paths (audit event ids, task ids): time-ordered to a quarter
of a microsecond, so ids made one after the other in different processes of one host sort in
the order they were made (a task's ``submitted`` event, made by the submitter, before its
``started``, made by the worker that read it), and in creation order within one process."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator

# The variant nibble (10xx) from a random hex digit's low two bits.
_VARIANT = {f"{i:x}": "89ab"[i & 3] for i in range(16)}
# The counter's 48 bits as text: 36 bits of block, formatted once per block, then the 12
# bits of an id within its block, from this table.
_LOW = [f"{i:03x}" for i in range(4096)]
_BLOCK_MASK = (1 << 36) - 1


def _reseed() -> None:
    """RFC 9562 §6.2: the 12 bits after the version are the fraction of the millisecond
    (method 3, increased clock precision: 1/4096 ms), then 14 random bits drawn once per
    process and a 48-bit counter that starts at a random value (method 1). An id costs a
    step of an iterator and a few concatenations, where drawing and formatting 74 random
    bits per id was a third of the cost of a task's audit events
    (``loadtests/bench_hot_path.py``). Two processes repeat an id only if they draw the
    same 14 bits and their counters meet within the same quarter microsecond."""
    global _stem, _blocks, _tails, _clock
    raw = os.urandom(8)
    rand = raw[:4].hex()
    _stem = f"-{_VARIANT[rand[3]]}{rand[4:7]}-"
    _blocks = itertools.count(int.from_bytes(raw[4:]) >> 1)  # 31 bits: far from wrapping
    _tails = iter(())
    # The text of the last millisecond seen, up to the counter: ids made in the same
    # millisecond share it. One tuple, so threads never see half of it.
    _clock = (-1, "")


_stem: str
_blocks: itertools.count[int]
_tails: Iterator[str]
_clock: tuple[int, str]
_reseed()
# A forked child would otherwise go on with its parent's random bits and counter.
os.register_at_fork(after_in_child=_reseed)


def _next_block() -> Iterator[str]:
    """The next 4,096 counter values as text. Threads that run out at once each take a
    block of their own (``next`` on ``itertools.count`` and on a list iterator is atomic);
    a block one of them drops is never used again, so no value repeats."""
    global _tails
    high = f"{next(_blocks) & _BLOCK_MASK:09x}"
    _tails = tails = iter([high + low for low in _LOW])
    return tails


def uuid7_str() -> str:
    """A UUIDv7 as text: 48 bits of Unix time in ms, 12 bits of the millisecond's
    fraction, the process's 14 random bits, then its counter."""
    global _clock
    ms, sub = divmod(time.time_ns(), 1_000_000)
    last, head = _clock
    if ms != last:
        t = f"{ms & 0xFFFF_FFFF_FFFF:012x}"
        head = f"{t[:8]}-{t[8:]}-7"
        _clock = (ms, head)
    tail = next(_tails, None)
    if tail is None:
        tail = next(_next_block())
    return head + _LOW[sub * 4096 // 1_000_000] + _stem + tail
