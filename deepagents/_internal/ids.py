"""Fast UUIDv7 strings for hot paths (audit event ids): time-ordered to the millisecond."""

from __future__ import annotations

import os
import time

# The variant nibble (10xx) from a random hex digit's low two bits.
_VARIANT = {f"{i:x}": "89ab"[i & 3] for i in range(16)}
# The text of the last millisecond seen, up to the version digit: ids made in the same
# millisecond (a batch of events) share it. One tuple, so threads never see half of it.
_clock: tuple[int, str] = (-1, "")


def uuid7_str() -> str:
    """A UUIDv7 as text: 48 bits of Unix time in ms, then 74 random bits from the OS. Built
    from strings rather than one 128-bit integer: 1.22-1.32 against 2.23-2.44 µs per id
    (``loadtests/bench_hot_path.py``, ``docs/benchmarks.md``, session 9)."""
    global _clock
    ms = time.time_ns() // 1_000_000
    last, head = _clock
    if ms != last:
        t = f"{ms & 0xFFFF_FFFF_FFFF:012x}"
        head = f"{t[:8]}-{t[8:]}-7"
        _clock = (ms, head)
    r = os.urandom(10).hex()
    return f"{head}{r[:3]}-{_VARIANT[r[3]]}{r[4:7]}-{r[7:19]}"
