"""``deepagents audit-writer``: drain the audit outbox streams into PostgreSQL.

Also runnable alone as ``python -m deepagents.cli.audit_writer`` (used by the crash tests).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from typing import Any

from deepagents._internal.extras import require_extra
from deepagents.cli.common import load_runtime, redis_client, report, require_redis_url, run
from deepagents.cli.signals import on_stop
from deepagents.errors import DeepAgentsError

log = logging.getLogger("deepagents.audit")


def register(sub: Any) -> None:
    p = sub.add_parser("audit-writer", help="drain the audit outbox streams into PostgreSQL")
    _arguments(p)
    p.set_defaults(func=main)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--consumer", help="consumer name (default: host-pid); reuse it across "
                   "restarts to re-read this writer's unacked entries at once")  # fmt: skip
    p.add_argument("--no-migrate", action="store_true", help="do not apply migrations at start")


def main(args: argparse.Namespace) -> int:
    require_extra("audit", "`deepagents audit-writer`")
    from deepagents.store.audit.db import database_url
    from deepagents.store.audit.writer import AuditWriter

    runtime = load_runtime(args.config)
    settings = runtime.settings
    if args.consumer:
        settings = settings.model_copy(update={"consumer": args.consumer})
    redis_url, db_url = require_redis_url(settings), database_url(settings)

    async def serve() -> None:
        async with redis_client(
            redis_url, max_connections=8, cluster=settings.redis_cluster
        ) as client:
            writer = AuditWriter(client, settings=settings, config=runtime.config, dsn=db_url,
                                 run_migrations=not args.no_migrate)  # fmt: skip
            task = asyncio.ensure_future(writer.run())

            def force() -> None:
                task.cancel()  # unacked entries stay pending and are re-read at restart

            with on_stop(asyncio.get_running_loop(), writer.stop, force):
                await task
            log.info("audit writer stopped: %s", writer.stats)

    run(serve())
    return 0


def standalone(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deepagents.cli.audit_writer")
    parser.add_argument("--config")
    _arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        return main(args)
    except DeepAgentsError as exc:
        return report(exc)


if __name__ == "__main__":
    sys.exit(standalone())
