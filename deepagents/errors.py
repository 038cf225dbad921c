"""The exception tree of deepagents.

Every error carries a stable ``code`` (the ``Result.error.code`` values of the data
contract) and says whether retrying can help::

    DeepAgentsError
    ├── ConfigError            bad configuration file or environment (names file, field, reason)
    │   └── MissingExtra       a command needs an optional extra that is not installed
    ├── SubmitError            the orchestrator refused a task; nothing was enqueued
    │   ├── UnknownIntent
    │   ├── InvalidPayload
    │   ├── PayloadTooLarge
    │   ├── DeadlinePassed
    │   ├── IdempotencyConflict an idempotency key reused with a different task
    │   └── Overloaded         backlog over its limit; back off and retry (retryable)
    ├── TransportError         the message bus failed (retryable unless stated)
    │   ├── RedisNotSafe       e.g. an evicting maxmemory-policy; refuse to run
    │   └── GroupVanished      NOGROUP: the stream lost its consumer group
    ├── TaskError              raised by agents to steer the runtime
    │   ├── InvalidInput       the task cannot succeed as given (not retried)
    │   └── RetryableError     a failure that may pass (retried with backoff)
    └── ResultTimeout          a handle's result did not arrive in time
"""

from __future__ import annotations

from collections.abc import Collection


class DeepAgentsError(Exception):
    """Root of every error deepagents raises on purpose."""

    code: str = "error"
    retryable: bool = False

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or self.code).strip())

    @property
    def message(self) -> str:
        return str(self)


class ConfigError(DeepAgentsError):
    """The configuration is invalid."""

    code = "config_error"

    def __init__(self, reason: str, *, file: str | None = None, field: str | None = None) -> None:
        self.file = file
        self.field = field
        self.reason = reason
        where = ": ".join(part for part in (file, field) if part)
        super().__init__(f"{where}: {reason}" if where else reason)


class MissingExtra(ConfigError):
    """A command needs packages of an optional extra that is not installed."""

    def __init__(self, what: str, extra: str, module: str) -> None:
        self.extra = extra
        super().__init__(
            f"{what} needs the [{extra}] extra ({module} is not installed): "
            f"pip install 'deepagents-middleware[{extra}]'"
        )


class SubmitError(DeepAgentsError):
    """The task was refused; nothing was enqueued."""

    code = "invalid_input"


class UnknownIntent(SubmitError):
    """No agent type serves this intent."""

    code = "unroutable"


class InvalidPayload(SubmitError):
    """The payload does not match what the agent accepts."""

    code = "invalid_input"


class PayloadTooLarge(SubmitError):
    """The encoded task is larger than the configured limit."""

    code = "payload_too_large"


class DeadlinePassed(SubmitError):
    """The task's deadline is already in the past."""

    code = "deadline_exceeded"


class IdempotencyConflict(SubmitError):
    """The idempotency key was first used for a different task (intent, payload or
    priority differ): a retry must resend the same task, a new task needs a new key."""

    code = "idempotency_conflict"

    def __init__(self, message: str, *, task_id: str) -> None:
        self.task_id = task_id  # the first task's id, the one the key belongs to
        super().__init__(message)


class Overloaded(SubmitError):
    """The target stream's backlog is over its limit; retry later."""

    code = "overloaded"
    retryable = True

    def __init__(self, message: str, *, retry_after_s: float = 1.0) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message)


class TransportError(DeepAgentsError):
    """The message bus failed."""

    code = "transport_error"
    retryable = True


class NotReplicated(TransportError):
    """Tasks were written to the primary, but fewer replicas than ``min_replicas`` confirmed
    them in time: a failover now could lose them. Resend with the same idempotency key."""

    code = "not_replicated"

    def __init__(
        self,
        task_ids: list[str],
        *,
        confirmed: int,
        replicas: int,
        wait_ms: int,
        stage: str = "enqueue",
    ):
        self.task_ids = task_ids  # written to the primary, not confirmed by its replicas
        self.confirmed, self.replicas, self.wait_ms = confirmed, replicas, wait_ms
        self.stage = stage  # "locations": their location records only, nothing enqueued
        shown = ", ".join(task_ids[:5]) + (f" and {len(task_ids) - 5} more" * (len(task_ids) > 5))
        confirmations = f"{confirmed} of {replicas} replica(s) confirmed within {wait_ms} ms"
        super().__init__(
            f"enqueue: written to the primary, but {confirmations}, so a failover now could "
            f"lose task(s) {shown}; resend them with the same idempotency key"
            if stage == "enqueue"
            else f"{stage}: {confirmations}; nothing was enqueued for task(s) {shown}: "
            "resend them with the same idempotency key"
        )

    def only(self, task_ids: Collection[str]) -> NotReplicated:
        """The same refusal for some of its tasks (a caller must not see others' ids)."""
        mine = [t for t in self.task_ids if t in task_ids]
        return NotReplicated(
            mine,
            confirmed=self.confirmed,
            replicas=self.replicas,
            wait_ms=self.wait_ms,
            stage=self.stage,
        )


class RedisNotSafe(TransportError):
    """Redis is configured in a way that can lose tasks."""

    code = "redis_not_safe"
    retryable = False


class GroupVanished(TransportError):
    """A stream's consumer group is gone (Redis restarted without persistence?)."""

    code = "group_vanished"
    retryable = False


class TaskError(DeepAgentsError):
    """Raised by agent code to tell the runtime how a task failed."""

    code = "agent_error"


class InvalidInput(TaskError):
    """The task's input cannot succeed as given; it is answered failed, not retried."""

    code = "invalid_input"


class RetryableError(TaskError):
    """A failure that may pass (a timeout, an unavailable model); retried with backoff."""

    code = "agent_error"
    retryable = True


class ResultTimeout(DeepAgentsError):
    """The result did not arrive within the timeout; the task may still complete."""

    code = "result_timeout"
    retryable = True
