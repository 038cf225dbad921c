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
from deepagents.cli.common import load_runtime, require_redis_url
from deepagents.errors import ConfigError


def register(sub: Any) -> None:
    p = sub.add_parser("gateway", help="serve the HTTP gateway (FastAPI on uvicorn)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback)")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
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
    runtime = load_runtime(args.config)  # fail here, with a clear message, not in each worker
    require_redis_url(runtime.settings)
    if args.config:
        # uvicorn's worker processes build the app from the environment.
        os.environ["DEEPAGENTS_CONFIG"] = args.config
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
        "server_header": False,
        # httptools with a deadline for the request line and headers (slowloris)
        "http": "deepagents.gateway.http:HeaderDeadlineProtocol",
    }
    app = "deepagents.gateway.app:create_served_app"
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
