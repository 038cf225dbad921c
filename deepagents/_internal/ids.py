"""Fast UUIDv7 strings for hot paths (audit event ids): time-ordered to the millisecond."""

from __future__ import annotations

import os
import time

_VERSION = 0x7 << 76
_VARIANT = 0b10 << 62


def uuid7_str() -> str:
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & 0xFFFF_FFFF_FFFF) << 80 | _VERSION | (rand >> 62 & 0xFFF) << 64 | _VARIANT
    value |= rand & 0x3FFF_FFFF_FFFF_FFFF
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
