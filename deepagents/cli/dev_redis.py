"""``deepagents dev-redis [--port N]``: a throwaway Redis for trying deepagents locally.

The same server the demo starts (the system's ``redis-server``, else the one the
``embedded`` extra ships), on 127.0.0.1, keeping nothing on disk, with the settings workers
require (``noeviction``). It prints the ``export DEEPAGENTS_REDIS_URL=…`` line to use in
another shell and runs until interrupted. Never for production: nothing survives it.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import socket
import threading
from typing import Any

from deepagents._internal.redis_server import EmbeddedRedis
from deepagents.errors import ConfigError


def register(sub: Any) -> None:
    p = sub.add_parser("dev-redis", help="run a throwaway local Redis until interrupted")
    p.add_argument("--port", type=int, default=6379, help="port on 127.0.0.1 (default: 6379)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", args.port), 0.5):
        raise ConfigError(
            f"--port: 127.0.0.1:{args.port} is in use (a Redis already? then "
            f"export DEEPAGENTS_REDIS_URL=redis://127.0.0.1:{args.port}/0), or pass another --port"
        )
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    with EmbeddedRedis(port=args.port) as server:
        print(f"export DEEPAGENTS_REDIS_URL={server.url}", flush=True)
        print("a throwaway Redis (nothing kept on disk); Ctrl-C stops it", flush=True)
        while not stop.wait(1.0):
            if server.process is None or server.process.poll() is not None:
                print("deepagents: error: redis-server exited", flush=True)
                return 1
    return 0
