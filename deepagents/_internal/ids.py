"""Fast UUIDv7 strings for hot paths (audit event ids): time-ordered to the millisecond."""

from __future__ import annotations

import os
import time

# The variant nibble (10xx) from a random hex digit's low two bits.
_VARIANT = {f"{i:x}": "89ab"[i & 3] for i in range(16)}
# The text of the last millisecond seen, up to the version digit: ids made in the same
# millisecond (a batch of events) share it. One tuple, so threads never see half of it.
_clock: tuple[int, str] = (-1, "")
# Ids' random parts are drawn from the OS and formatted 256 at a time: a getrandom system
# call and the slicing per id were most of the cost of building a task's audit events.
_POOL_IDS = 256
# Formatted random parts (``xxx-Vxxx-xxxxxxxxxxxx``) not yet used. ``list.pop`` is atomic,
# so threads share it without a lock; two refilling at once only add more.
_tails: list[str] = []


def _refill() -> None:
    raw = os.urandom(10 * _POOL_IDS).hex()
    _tails.extend(
        f"{r[:3]}-{_VARIANT[r[3]]}{r[4:7]}-{r[7:19]}"
        for r in (raw[i : i + 20] for i in range(0, len(raw), 20))
    )


# A forked child starts with a copy of its parent's unused parts: drawing from them would
# repeat the parent's ids.
os.register_at_fork(after_in_child=_tails.clear)


def uuid7_str() -> str:
    """A UUIDv7 as text: 48 bits of Unix time in ms, then 74 random bits from the OS. Built
    from strings rather than one 128-bit integer, the random parts in bulk
    (``loadtests/bench_hot_path.py``, ``docs/benchmarks.md``)."""
    global _clock
    ms = time.time_ns() // 1_000_000
    last, head = _clock
    if ms != last:
        t = f"{ms & 0xFFFF_FFFF_FFFF:012x}"
        head = f"{t[:8]}-{t[8:]}-7"
        _clock = (ms, head)
    while True:
        try:
            return head + _tails.pop()
        except IndexError:
            _refill()
