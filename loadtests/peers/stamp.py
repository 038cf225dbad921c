"""Enqueue -> handler start, as each system's handler sees it: the producer puts its wall
clock (ns) in the task, the handler writes the difference to ``PEER_LAT_FILE`` (one line
per task, µs). Tasks sent with ``t = 0`` (the drain's) are not recorded."""

import os
import time

_out = None


def record(sent_ns: int) -> None:
    global _out
    if not sent_ns:
        return
    waited_us = (time.time_ns() - sent_ns) / 1000
    if _out is None:
        _out = open(os.environ["PEER_LAT_FILE"], "a", buffering=1)  # noqa: SIM115
    _out.write(f"{waited_us:.1f}\n")
