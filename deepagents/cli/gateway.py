"""``deepagents gateway [--host --port --workers]``: serve the HTTP gateway with uvicorn.

``--new-key TENANT`` prints a fresh API key and the config line holding only its hash.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any

from deepagents._internal.extras import require_extra
from deepagents.cli.common import Runtime, load_runtime, redis_client, require_redis_url, run
from deepagents.compose import services_for
from deepagents.errors import ConfigError

# How the CLI tells uvicorn's worker processes the address to announce.
ADDRESS_ENV = "DEEPAGENTS_GATEWAY_ADDRESS"


def register(sub: Any) -> None:
    p = sub.add_parser("gateway", help="serve the HTTP gateway (FastAPI on uvicorn)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback)")
    p.add_argument("--port", type=int, default=8080, help="TCP port (default: 8080)")
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (default: 1)")
    p.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    p.add_argument(
        "--new-key",
        metavar="TENANT",
        help="print a new API key for TENANT and its config entry, then exit",
    )
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    require_extra("gateway", "`deepagents gateway`")
    if args.new_key:
        return _new_key(args.new_key)
    if args.workers < 1 or not 0 < args.port < 65536:
        raise ConfigError("--workers must be >= 1 and --port within 1-65535")
    # Fail here, in one line, not in uvicorn's start-up (a traceback per worker process).
    runtime = load_runtime(args.config)
    run(_check_redis(runtime))
    if args.config:
        # uvicorn's worker processes build the app from the environment.
        os.environ["DEEPAGENTS_CONFIG"] = args.config
    os.environ[ADDRESS_ENV] = f"http://{_host(args.host)}:{args.port}"
    import uvicorn

    options: dict[str, Any] = {
        "factory": True,
        "host": args.host,
        "port": args.port,
        "workers": args.workers,
        "log_level": args.log_level,
        "access_log": False,
        "timeout_keep_alive": 5,
        "timeout_graceful_shutdown": 10,
        # With --workers, a SIGHUP starts each new process and waits this long for it to
        # serve (uvicorn's default is 5 s). Importing the app takes seconds on a loaded
        # host, and a process that fails to start is seen at once however long this is.
        "timeout_worker_healthcheck": 30,
        "server_header": False,
        # httptools with a deadline for the request line and headers (slowloris)
        "http": "deepagents.gateway.http:HeaderDeadlineProtocol",
    }
    app = "deepagents.cli.gateway:served_app"
    if args.workers == 1 or os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        uvicorn.run(app, **options)
        return 0
    # Several processes: each keeps its metrics in a file here, and any of them answers
    # /metrics with the sum (deepagents.gateway.metrics). Set before the processes start,
    # since prometheus_client reads it on import; a fresh directory per run, so no counts
    # of an earlier run are added in.
    with tempfile.TemporaryDirectory(prefix="deepagents-metrics-") as path:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
        try:
            uvicorn.run(app, **options)
        finally:
            del os.environ["PROMETHEUS_MULTIPROC_DIR"]
    return 0


async def _check_redis(runtime: Runtime) -> None:
    url = require_redis_url(runtime.settings)
    async with redis_client(url, max_connections=2, cluster=runtime.settings.redis_cluster) as c:
        bus = services_for(c, runtime.settings).bus
        try:
            await bus.check_server()
        finally:
            await bus.aclose()


def served_app() -> Any:
    """What uvicorn runs in each worker process: the gateway, announcing its address on
    stdout once it is ready to serve."""
    from deepagents.gateway.app import create_served_app

    address = os.environ.get(ADDRESS_ENV, "")

    def announce() -> None:
        sys.stdout.write(f"deepagents gateway listening on {address} (pid {os.getpid()})\n")
        sys.stdout.flush()

    return create_served_app(on_ready=announce if address else None)


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _new_key(tenant: str) -> int:
    from deepagents.config.gateway import ApiKey
    from deepagents.gateway.auth import hash_key, new_key

    key = new_key()
    entry = ApiKey(tenant=tenant, sha256=hash_key(key))
    sys.stdout.write(f"key (give it to the client, store it nowhere else): {key}\n")
    sys.stdout.write(
        f"config (under gateway.api_keys): - {{tenant: {entry.tenant}, sha256: {entry.sha256}}}\n"
    )
    return 0
