"""Errors of the audit store, and which PostgreSQL failures are worth retrying."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import asyncpg

from deepagents.errors import DeepAgentsError, ErrorCode


class AuditStoreError(DeepAgentsError):
    """The audit database failed."""

    code = ErrorCode.AUDIT_STORE_ERROR
    retryable = True


class AuditUnavailable(AuditStoreError):
    """PostgreSQL is unreachable or refusing work; events wait in Redis."""

    code = ErrorCode.AUDIT_UNAVAILABLE


class MigrationError(AuditStoreError):
    """A schema migration failed or was edited after it was applied."""

    code = ErrorCode.MIGRATION_ERROR
    retryable = False


class NoDatabase(AuditStoreError):
    """No database is configured."""

    code = ErrorCode.CONFIG_ERROR
    retryable = False


# Failures that pass by themselves: the server is down, restarting, out of connections,
# out of disk, or a statement/lock timeout fired (RELIABILITY rows 29-32).
_TRANSIENT: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.CannotConnectNowError,
    asyncpg.TooManyConnectionsError,
    asyncpg.OperatorInterventionError,
    asyncpg.InsufficientResourcesError,
    asyncpg.QueryCanceledError,
    asyncpg.LockNotAvailableError,
    asyncpg.DeadlockDetectedError,
    asyncpg.SerializationError,
    asyncpg.InternalServerError,
)


def is_transient(exc: BaseException) -> bool:
    return isinstance(exc, _TRANSIENT)


@contextlib.contextmanager
def database_errors(what: str) -> Iterator[None]:
    """PostgreSQL refusals (bad password, no such database, ...) as one clear line."""
    try:
        yield
    except asyncpg.UndefinedTableError as exc:
        raise AuditStoreError(f"{what}: no audit table here; run `deepagents db migrate`") from exc
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
        raise AuditStoreError(f"{what}: {type(exc).__name__}: {exc}") from exc
