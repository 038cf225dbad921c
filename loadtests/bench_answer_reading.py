"""The parts of a batched remote task's path that ``docs/benchmarks.md`` quotes alone.

    .venv/bin/python loadtests/bench_answer_reading.py [--answers 128] [--rounds 5]

Per answer of a ``run_batch`` body of ``--answers`` no-op answers (uuid ids, as a worker's
tasks have): the strict parse (the json module with its hooks) against the orjson read
that ``answers.py`` uses when it can, and the search for a run of 19 digits as a regular
expression against ``bytes.translate``. Per waiting future, 1,000 in flight on uvloop: a
timer each (``call_later`` and its cancel) against ``Expiries`` (add and discard). Medians
of ``--rounds`` rounds, µs.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson
import uvloop

from deepagents.remote.answers import (
    _DIGITS_AS_ZERO,
    _LONG_DIGITS,
    parse_answers,
    strict_parse,
)
from deepagents.remote.expiry import Expiries

_LONG_DIGITS_RE = re.compile(rb"[0-9]{19}")


def per_call_us(fn: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) * 1e6 / calls


def body(answers: int) -> bytes:
    items = [
        {"id": str(uuid.uuid4()), "result": {"status": "success", "output": {}}}
        for _ in range(answers)
    ]
    return orjson.dumps({"answers": items})


async def timers_us(futures: int, rounds: int) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    live = [loop.call_later(60, print) for _ in range(1000)]  # 1,000 waits in flight
    each: list[float] = []
    shared: list[float] = []
    expiries = Expiries()
    for _ in range(rounds):
        batch = [loop.create_future() for _ in range(futures)]
        start = time.perf_counter()
        for future in batch:
            loop.call_later(30, future.cancel).cancel()
        each.append((time.perf_counter() - start) * 1e6 / futures)
        start = time.perf_counter()
        dues = [expiries.add(future, 30) for future in batch]
        for future, due in zip(batch, dues, strict=True):
            expiries.discard(future, due)
        shared.append((time.perf_counter() - start) * 1e6 / futures)
    for handle in live:
        handle.cancel()
    return {
        "timer_each_us": round(statistics.median(each), 3),
        "expiries_us": round(statistics.median(shared), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--answers", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    raw = body(args.answers)
    assert parse_answers(raw) == (strict_parse(raw), False)  # the same document, read faster
    calls = 2000
    figures: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for name, fn in (
            ("strict_parse_us", lambda: strict_parse(raw)),
            ("orjson_read_us", lambda: parse_answers(raw)),
            ("digits_regex_us", lambda: _LONG_DIGITS_RE.search(raw)),
            ("digits_translate_us", lambda: _LONG_DIGITS in raw.translate(_DIGITS_AS_ZERO)),
        ):
            figures.setdefault(name, []).append(per_call_us(fn, calls) / args.answers)
    out: dict[str, Any] = {"answers": args.answers, "body_bytes": len(raw), "per": "answer"}
    out |= {name: round(statistics.median(v), 3) for name, v in figures.items()}
    out |= uvloop.run(timers_us(10_000, args.rounds))
    print(orjson.dumps(out).decode())


if __name__ == "__main__":
    main()
