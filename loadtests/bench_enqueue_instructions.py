"""Instructions per enqueue, one call per task, for deepagents and its peers, counted by
callgrind: the producer process and the Redis server each. Wall clock on these shared VMs
moves by a factor of two from one run to the next; instruction counts do not.

    .venv/bin/python loadtests/bench_enqueue_instructions.py --peers-venv .venv-peers
    .venv/bin/python loadtests/bench_enqueue_instructions.py --systems deepagents,bare

Per system, against a fresh Redis each time:

- producer: its enqueue loop (``Orchestrator.submit`` per task with the outbox on, as
  ``bench_peers.py``; the peers' normal APIs through ``peers/enqueue.py``) run under
  ``valgrind --tool=callgrind`` for N0 and N1 tasks; the difference of the two totals over
  N1 - N0, so start-up and imports cancel;
- Redis: ``redis-server`` under callgrind, its counters zeroed before the same loop (run
  normally) and dumped after it, N0 and N1 tasks, the same difference.

What one enqueue costs besides these (a ``send`` and a ``recv`` per round trip, the wake-ups)
is the same for every system: each makes one round trip per task. Needs valgrind (Debian's
``valgrind`` package).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

from deepagents._internal.redis_server import EmbeddedRedis

REPO = Path(__file__).resolve().parents[1]
PEERS = REPO / "loadtests" / "peers"
SYSTEMS = ("deepagents", "faststream", "taskiq", "dramatiq", "bare")
CONFIG = """
defaults: {shards: 4, max_backlog: 10000000, batch_size: 100}
agents: {stamp: {class: "stamp_agent:StampAgent"}}
"""
_TOTALS = re.compile(rb"^(?:summary|totals): (\d+)", re.MULTILINE)


async def _produce(url: str, n: int) -> None:
    """deepagents' loop: what ``bench_peers.py`` times as its enqueue."""
    from deepagents.config import Settings, parse_config
    from deepagents.orchestrator import Orchestrator
    from deepagents.transport.redis_streams import connect

    client = connect(url)
    settings = Settings(prefix="count", outbox=True)
    async with Orchestrator.from_client(
        client, config=parse_config(CONFIG), settings=settings
    ) as o:
        for i in range(n):
            await o.submit({"intent": "stamp", "payload": {"i": i, "t": 0}})
    await client.aclose()


def producer(system: str, url: str, n: int, peers_python: str) -> list[str]:
    if system == "deepagents":
        return [sys.executable, __file__, "--produce", url, str(n)]
    return [peers_python, str(PEERS / "enqueue.py"), system, str(n)]


def env(url: str) -> dict[str, str]:
    path = os.pathsep.join([str(PEERS), str(REPO / "loadtests"), str(REPO)])
    return {**os.environ, "PEER_REDIS_URL": url, "PYTHONPATH": path}


def callgrind_total(path: Path) -> int:
    match = _TOTALS.search(path.read_bytes())
    if match is None:
        raise RuntimeError(f"no totals in {path}")
    return int(match.group(1))


def producer_instructions(system: str, n: int, work: Path, peers_python: str) -> int:
    with EmbeddedRedis() as server:
        out = work / f"producer.{system}.{n}.cg"
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
        command += producer(system, server.url, n, peers_python)
        subprocess.run(command, env=env(server.url), check=True, capture_output=True, timeout=1800)
        return callgrind_total(out)


def redis_instructions(system: str, n: int, work: Path, peers_python: str) -> int:
    wrapper = ("valgrind", "--tool=callgrind", f"--callgrind-out-file={work}/redis.cg.%p")
    server = EmbeddedRedis(wrapper=wrapper).start(timeout=120)
    try:
        assert server.process is not None
        pid = str(server.process.pid)  # valgrind runs the server in its own process
        control = ["callgrind_control"]
        subprocess.run([*control, "-z", pid], check=True, capture_output=True, timeout=120)
        command = producer(system, server.url, n, peers_python)
        subprocess.run(command, env=env(server.url), check=True, capture_output=True, timeout=1800)
        before = set(work.glob("redis.cg.*"))
        subprocess.run([*control, "-d", pid], check=True, capture_output=True, timeout=120)
        (dump,) = set(work.glob("redis.cg.*")) - before
        return callgrind_total(dump)
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", default="deepagents,faststream,bare")
    parser.add_argument("--peers-venv", type=Path, default=REPO / ".venv-peers")
    parser.add_argument("--n0", type=int, default=200)
    parser.add_argument("--n1", type=int, default=1200)
    parser.add_argument("--produce", nargs=2, metavar=("URL", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.produce:
        asyncio.run(_produce(args.produce[0], int(args.produce[1])))
        return
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("valgrind is not installed: apt-get install -y valgrind")
    peers_python = str(args.peers_venv / "bin" / "python")
    for system in args.systems.split(","):
        if system not in SYSTEMS:
            sys.exit(f"unknown system {system!r}: one of {', '.join(SYSTEMS)}")
        with tempfile.TemporaryDirectory(prefix="count-enqueue-") as tmp:
            work = Path(tmp)
            span = args.n1 - args.n0
            python = [
                producer_instructions(system, n, work, peers_python) for n in (args.n0, args.n1)
            ]
            redis = [redis_instructions(system, n, work, peers_python) for n in (args.n0, args.n1)]
        print(
            orjson.dumps(
                {
                    "system": system,
                    "producer_ir_per_enqueue": round((python[1] - python[0]) / span),
                    "redis_ir_per_enqueue": round((redis[1] - redis[0]) / span),
                }
            ).decode(),
            flush=True,
        )


if __name__ == "__main__":
    main()
