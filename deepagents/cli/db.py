"""``deepagents db migrate|prune``: the audit database schema and its retention."""

from __future__ import annotations

import argparse
from typing import Any

from deepagents._internal.extras import require_extra
from deepagents.cli.common import run
from deepagents.config import load_settings
from deepagents.errors import ConfigError


def register(sub: Any) -> None:
    p = sub.add_parser("db", help="manage the audit database (PostgreSQL)")
    actions = p.add_subparsers(dest="db_action", required=True, metavar="ACTION")
    m = actions.add_parser(
        "migrate",
        help="apply the missing schema migrations (idempotent; safe from several processes)",
    )
    m.set_defaults(func=_migrate)
    r = actions.add_parser("prune", help="drop audit partitions older than the retention")
    r.add_argument("--keep-days", type=int, help="default: $DEEPAGENTS_AUDIT_RETENTION_DAYS")
    r.set_defaults(func=_prune)


def _migrate(args: argparse.Namespace) -> int:
    require_extra("audit", "`deepagents db`")
    from deepagents.store.audit.db import database_url
    from deepagents.store.audit.errors import database_errors
    from deepagents.store.audit.migrate import migrate

    settings = load_settings()  # the database needs no config file
    url = database_url(settings)
    with database_errors("db migrate"):
        applied = run(migrate(url, settings.audit_schema))
    where = f"schema {settings.audit_schema}"
    print(f"applied {', '.join(applied)} to {where}" if applied else f"{where} is up to date")
    return 0


def _prune(args: argparse.Namespace) -> int:
    require_extra("audit", "`deepagents db`")
    from deepagents.store.audit.db import database_url
    from deepagents.store.audit.errors import database_errors
    from deepagents.store.audit.migrate import prune

    settings = load_settings()  # the database needs no config file
    keep = args.keep_days if args.keep_days is not None else settings.audit_retention_days
    if keep is None or keep < 1:
        raise ConfigError("give --keep-days N (N >= 1) or set DEEPAGENTS_AUDIT_RETENTION_DAYS")
    with database_errors("db prune"):
        dropped = run(prune(database_url(settings), settings.audit_schema, keep))
    print(f"dropped {', '.join(dropped)}" if dropped else "nothing older than the retention")
    return 0
