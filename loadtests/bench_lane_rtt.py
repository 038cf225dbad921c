"""Wall time of one round trip over the bus's own connections (``lanes.py``) when nothing
is hot, as a lone task meets it under light load: calls 2 ms apart, on uvloop.

    .venv/bin/python loadtests/bench_lane_rtt.py [--against /path/to/other/tree] [--calls 2000]

With ``--against``, that tree's ``lanes.py`` runs interleaved with this tree's, call for
call on the same server and loop, so the machine's load falls on both alike (this tree's
package otherwise: its parser, pool and connection class). Prints the median µs of a
``PING`` and of an ``EVALSHA`` the size of a lone task's begin, per tree (a fresh embedded
Redis).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's package

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.transport.redis_streams import connect
from deepagents.transport.redis_streams import lanes as this_lanes

SCRIPT = "redis.call('HSET', KEYS[1], 'state', 'running', 'owner', ARGV[1]) return {{'ok', 1, 0}}"
LANES_PY = "deepagents/transport/redis_streams/lanes.py"


def other_lanes(tree: Path) -> Any:
    spec = importlib.util.spec_from_file_location("other_lanes", tree / LANES_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def measure(url: str, calls: int, against: Path | None) -> None:
    client = connect(url)
    trees = {"this tree": this_lanes.Lanes(client)}
    if against is not None:
        trees[str(against)] = other_lanes(against).Lanes(client)
    sha = await client.script_load(SCRIPT)
    args = ("EVALSHA", sha, 2, "bench:{t}:p2", "bench:{t}:t:x", "consumer-1", 1, "x" * 200)
    times: dict[tuple[str, str], list[float]] = {}
    for i in range(calls):
        for name, lanes in trees.items():
            for what, command in (("PING", ("PING",)), ("EVALSHA", args)):
                await asyncio.sleep(0.002)
                start = time.perf_counter_ns()
                await lanes.call(*command)
                if i >= calls // 10:  # the first tenth warms up
                    times.setdefault((name, what), []).append(time.perf_counter_ns() - start)
    for (name, what), ns in times.items():
        print(f"{name}: {what} {statistics.median(ns) / 1000:.1f} µs")
    for lanes in trees.values():
        await lanes.aclose()
    await client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--against", type=Path, help="another tree, interleaved with this one")
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    with EmbeddedRedis() as server:
        uvloop.run(measure(server.url, args.calls, args.against))
