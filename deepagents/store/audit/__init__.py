"""The audit log: outbox streams drained into a partitioned PostgreSQL table.

- ``AuditWriter``: the drain loop (``deepagents audit-writer``, or embedded in a worker).
- ``migrate``: versioned schema migrations (``deepagents db migrate``).
- ``AuditRepository``: the queries behind ``deepagents audit show|trace|cost``.
- ``Redactor``: what is removed or hashed before anything is written.
- ``EmbeddedPostgres`` (``deepagents.store.audit.embedded``): a private real PostgreSQL.
"""

from deepagents.store.audit.migrate import migrate
from deepagents.store.audit.outbox import Backlog
from deepagents.store.audit.redact import RedactionPolicy, Redactor
from deepagents.store.audit.repository import AuditRepository
from deepagents.store.audit.writer import AuditWriter, WriterStats

__all__ = [
    "AuditRepository",
    "AuditWriter",
    "Backlog",
    "RedactionPolicy",
    "Redactor",
    "WriterStats",
    "migrate",
]
