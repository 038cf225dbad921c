"""The error vocabulary of deepagents: the codes on the wire and the exception tree.

Every error carries a stable ``code`` (an ``ErrorCode``) and says whether retrying can
help::

    DeepAgentsError
    ├── ConfigError            bad configuration file or environment (names file, field, reason)
    │   └── MissingExtra       a command needs an optional extra that is not installed
    ├── SubmitError            the orchestrator refused a task; nothing was enqueued
    │   ├── UnknownIntent
    │   ├── InvalidPayload
    │   ├── PayloadTooLarge
    │   ├── DeadlinePassed
    │   ├── NotBeforeTooFar    a not_before further out than DEEPAGENTS_MAX_SCHEDULE_AHEAD_S
    │   ├── IdempotencyConflict an idempotency key reused with a different task
    │   └── Overloaded         backlog over its limit; back off and retry (retryable)
    ├── TransportError         the message bus failed (retryable unless stated)
    │   ├── RedisNotSafe       e.g. an evicting maxmemory-policy; refuse to run
    │   └── GroupVanished      NOGROUP: the stream lost its consumer group
    ├── TaskError              raised by agents to steer the runtime
    │   ├── InvalidInput       the task cannot succeed as given (not retried)
    │   ├── RetryableError     a failure that may pass (retried with backoff)
    │   │   └── CircuitOpen    a remote service is down for the fleet: wait, uncounted
    │   ├── StepError          a step or checkpoint that cannot be recorded (not retried)
    │   │   ├── StateTooLarge
    │   │   ├── StepTooLarge
    │   │   └── StateIncompatible  a checkpoint no migration makes valid (dead-lettered)
    │   ├── RemoteProtocolError a remote agent answered outside the wire protocol
    │   ├── DelegationTooDeep  a child past delegation.max_depth (not retried)
    │   └── InvalidResult  the agent broke the contract (wrong type, output not JSON): dead-lettered
    ├── ResultTimeout          a handle's result did not arrive in time
    ├── WebhookSignatureError  a webhook request whose signature does not verify (receivers)
    └── ReplyError             a reply to a task's question was refused (orch.reply)
        ├── ReplyTaskNotFound  no such task
        ├── NotWaiting         the task asks nothing now
        ├── AlreadyReplied     someone answered this question first
        └── InvalidReply       the answer does not fit the question's schema (names the field)
    TaskError
    └── AgentStopped       a middleware ended the agent's loop (not retried)
        ├── GuardrailDenied
        ├── LoopDetected
        └── LimitExceeded
"""

from __future__ import annotations

from collections.abc import Collection
from enum import StrEnum


class ErrorCode(StrEnum):
    """Every code deepagents puts on the wire: ``Result.error.code``, the ``code`` of each
    exception, dead-letter reasons and the gateway's problem documents. Clients branch on
    these strings: a value is never renamed."""

    # Result.error.code of a failed task
    INVALID_INPUT = "invalid_input"
    UNROUTABLE = "unroutable"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    AGENT_ERROR = "agent_error"
    MODEL_UNAVAILABLE = "model_unavailable"
    DROPPED = "dropped"
    CANCELLED = "cancelled"
    REJECTED = "rejected"  # can_handle said no
    DEAD_LETTERED = "dead_lettered"
    RESPONSE_TOO_LARGE = "response_too_large"  # a model's answer passed its size cap
    REMOTE_PROTOCOL_ERROR = "remote_protocol_error"  # a remote agent's answer broke the protocol
    CIRCUIT_OPEN = "circuit_open"  # a remote agent's service is down for the fleet
    STEP_ERROR = "step_error"  # a step or checkpoint the runtime cannot record (not JSON, ...)
    STATE_TOO_LARGE = "state_too_large"  # a checkpoint over the agent's max_state_bytes
    STEP_TOO_LARGE = "step_too_large"  # a step result too large for Redis, and no database
    # The agent broke its contract (a method returned the wrong type, output not JSON):
    # a bug, never retried; the task is dead-lettered on its first delivery
    INVALID_RESULT = "invalid_result"
    # Tool calls (deepagents.tools): a tool's own failure, a tool or its server that cannot
    # be reached, arguments its schema refuses, an answer that breaks the protocol, its cap
    TOOL_ERROR = "tool_error"
    TOOL_INVALID_ARGUMENTS = "tool_invalid_arguments"
    TOOL_PROTOCOL_ERROR = "tool_protocol_error"
    TOOL_TIMEOUT = "tool_timeout"
    TOOL_UNAVAILABLE = "tool_unavailable"
    # Exceptions (the orchestrator's refusals among them)
    ERROR = "error"
    CONFIG_ERROR = "config_error"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    OVERLOADED = "overloaded"
    TRANSPORT_ERROR = "transport_error"
    NOT_REPLICATED = "not_replicated"
    REDIS_NOT_SAFE = "redis_not_safe"
    GROUP_VANISHED = "group_vanished"
    RESULT_TIMEOUT = "result_timeout"
    # Human replies: the refusals of orch.reply, and a question nobody answered in time
    NOT_WAITING = "not_waiting"
    ALREADY_REPLIED = "already_replied"
    INVALID_REPLY = "invalid_reply"
    REPLY_TIMEOUT = "reply_timeout"
    DELEGATION_TOO_DEEP = "delegation_too_deep"  # a child past delegation.max_depth
    NOT_FOUND = "not_found"
    AUDIT_STORE_ERROR = "audit_store_error"
    AUDIT_UNAVAILABLE = "audit_unavailable"
    MIGRATION_ERROR = "migration_error"
    HTTP_ERROR = "http_error"  # an error response without a code, seen by the HTTP client
    # Why an entry was dead-lettered
    DECODE_ERROR = "decode_error"
    TOO_LARGE = "too_large"  # a task in the stream over DEEPAGENTS_MAX_PAYLOAD_BYTES
    PAYLOAD_LOST = "payload_lost"
    MAX_DELIVERIES = "max_deliveries"
    STATE_INCOMPATIBLE = "state_incompatible"  # a checkpoint no migration makes valid
    # The gateway's problem documents (with not_found, idempotency_conflict,
    # payload_too_large and overloaded above)
    EMPTY_BODY = "empty_body"
    INVALID_JSON = "invalid_json"
    DUPLICATE_KEY = "duplicate_key"
    NON_FINITE_NUMBER = "non_finite_number"
    NUMBER_TOO_LONG = "number_too_long"
    NUMBER_OUT_OF_RANGE = "number_out_of_range"
    NESTING_TOO_DEEP = "nesting_too_deep"
    TOO_MANY_KEYS = "too_many_keys"
    BAD_STRING = "bad_string"
    UNAUTHORIZED = "unauthorized"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    REQUEST_TIMEOUT = "request_timeout"
    TOO_LATE = "too_late"
    BODY_TOO_LARGE = "body_too_large"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    HEADERS_TOO_LARGE = "headers_too_large"
    VALIDATION_ERROR = "validation_error"
    UNKNOWN_INTENT = "unknown_intent"
    INVALID_PAYLOAD = "invalid_payload"
    DEADLINE_PASSED = "deadline_passed"
    NOT_BEFORE_TOO_FAR = "not_before_too_far"
    BATCH_TOO_LARGE = "batch_too_large"
    RATE_LIMITED = "rate_limited"
    TOO_MANY_IN_FLIGHT = "too_many_in_flight"
    INTERNAL_ERROR = "internal_error"
    UNAVAILABLE = "unavailable"
    # The agent toolkit's middleware ended the task (docs/tools.md, "Middleware")
    GUARDRAIL_DENIED = "guardrail_denied"
    LIMIT_EXCEEDED = "limit_exceeded"
    LOOP_DETECTED = "loop_detected"


class DeepAgentsError(Exception):
    """Root of every error deepagents raises on purpose."""

    code: ErrorCode = ErrorCode.ERROR
    retryable: bool = False

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or self.code).strip())

    @property
    def message(self) -> str:
        return str(self)


class ConfigError(DeepAgentsError):
    """The configuration is invalid."""

    code = ErrorCode.CONFIG_ERROR

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

    code = ErrorCode.INVALID_INPUT


class UnknownIntent(SubmitError):
    """No agent type serves this intent."""

    code = ErrorCode.UNROUTABLE


class InvalidPayload(SubmitError):
    """The payload does not match what the agent accepts."""

    code = ErrorCode.INVALID_INPUT


class PayloadTooLarge(SubmitError):
    """The encoded task is larger than the configured limit."""

    code = ErrorCode.PAYLOAD_TOO_LARGE


class DeadlinePassed(SubmitError):
    """The task's deadline is already in the past."""

    code = ErrorCode.DEADLINE_EXCEEDED


class NotBeforeTooFar(SubmitError):
    """The task's ``not_before`` is further out than DEEPAGENTS_MAX_SCHEDULE_AHEAD_S."""

    code = ErrorCode.NOT_BEFORE_TOO_FAR


class IdempotencyConflict(SubmitError):
    """The idempotency key was first used for a different task (intent, payload or
    priority differ): a retry must resend the same task, a new task needs a new key."""

    code = ErrorCode.IDEMPOTENCY_CONFLICT

    def __init__(self, message: str, *, task_id: str) -> None:
        self.task_id = task_id  # the first task's id, the one the key belongs to
        super().__init__(message)


class Overloaded(SubmitError):
    """The target stream's backlog is over its limit; retry later."""

    code = ErrorCode.OVERLOADED
    retryable = True

    def __init__(self, message: str, *, retry_after_s: float = 1.0) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message)


class TransportError(DeepAgentsError):
    """The message bus failed."""

    code = ErrorCode.TRANSPORT_ERROR
    retryable = True


class NotReplicated(TransportError):
    """Tasks were written to the primary, but fewer replicas than ``min_replicas`` confirmed
    them in time: a failover now could lose them. Resend with the same idempotency key."""

    code = ErrorCode.NOT_REPLICATED

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

    code = ErrorCode.REDIS_NOT_SAFE
    retryable = False


class GroupVanished(TransportError):
    """A stream's consumer group is gone (Redis restarted without persistence?)."""

    code = ErrorCode.GROUP_VANISHED
    retryable = False


class TaskError(DeepAgentsError):
    """Raised by agent code to tell the runtime how a task failed."""

    code = ErrorCode.AGENT_ERROR


class InvalidInput(TaskError):
    """The task's input cannot succeed as given; it is answered failed, not retried."""

    code = ErrorCode.INVALID_INPUT


class RetryableError(TaskError):
    """A failure that may pass (a timeout, an unavailable model); retried with backoff.

    ``retry_after_s`` is the soonest the next attempt may come (a ``Retry-After``)."""

    code = ErrorCode.AGENT_ERROR
    retryable = True
    # False: the failure says nothing about the task (nothing was tried), so the retry
    # keeps the attempt and gives its delivery back (``CircuitOpen``).
    counted: bool = True

    def __init__(self, message: str | None = None, *, retry_after_s: float = 0.0) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message)


class CircuitOpen(RetryableError):
    """The fleet's circuit breaker for a remote agent's service is open: the service was not
    called. The task waits ``retry_after_s`` and comes back with the same attempt; the
    delivery is not counted towards ``max_deliveries`` (``counted``), so a long outage does
    not dead-letter tasks. The task's deadline bounds the wait."""

    code = ErrorCode.CIRCUIT_OPEN
    counted = False


class StepError(TaskError):
    """A step or checkpoint the runtime cannot record (its value is not JSON, the agent
    declares no state model, ...): a programming error of the agent, so not retried."""

    code = ErrorCode.STEP_ERROR
    # Dead-letter the task rather than answer it failed: an operator must look at it.
    dead_letter: bool = False


class StateTooLarge(StepError):
    """A checkpoint's state is over the agent's max_state_bytes; the stored one is kept."""

    code = ErrorCode.STATE_TOO_LARGE


class StepTooLarge(StepError):
    """A step's result is over the claim-check threshold and no database holds large ones."""

    code = ErrorCode.STEP_TOO_LARGE


class StateIncompatible(StepError):
    """A checkpoint written under another agent version that ``migrate_state`` could not
    turn into a valid state: the task is dead-lettered, never retried in a loop."""

    code = ErrorCode.STATE_INCOMPATIBLE
    dead_letter = True


class RemoteProtocolError(TaskError):
    """A remote agent's response broke the wire protocol (not retried: it would again)."""

    code = ErrorCode.REMOTE_PROTOCOL_ERROR


class InvalidResult(TaskError):
    """The agent broke its contract: a method returned the wrong type, or its output is not
    JSON. A bug, so it would break the same way on every delivery: the task is dead-lettered
    on its first delivery with the cause (``docs/retries.md``)."""

    code = ErrorCode.INVALID_RESULT

    @classmethod
    def caused_by(cls, what: str, cause: BaseException) -> InvalidResult:
        """``what`` went wrong, with the cause's type and message (never a payload value:
        callers pass causes whose messages name types and fields only)."""
        return cls(f"{what} ({type(cause).__name__}: {cause})")


class ResultTimeout(DeepAgentsError):
    """The result did not arrive within the timeout; the task may still complete."""

    code = ErrorCode.RESULT_TIMEOUT
    retryable = True


class ReplyError(DeepAgentsError):
    """A reply to a waiting task's question was refused; nothing was applied."""

    code = ErrorCode.ERROR


class ReplyTaskNotFound(ReplyError):
    """No such task (or its records expired)."""

    code = ErrorCode.NOT_FOUND


class NotWaiting(ReplyError):
    """The task is not waiting for an answer (queued, running, done, or its wait timed out)."""

    code = ErrorCode.NOT_WAITING

    def __init__(self, message: str, *, state: str) -> None:
        self.state = state
        super().__init__(message)


class AlreadyReplied(ReplyError):
    """The question was answered already; the first answer stands."""

    code = ErrorCode.ALREADY_REPLIED


class InvalidReply(ReplyError):
    """The answer does not validate against the question's JSON Schema."""

    code = ErrorCode.INVALID_REPLY

    def __init__(self, field: str, reason: str) -> None:
        self.field = field  # a JSON path in the answer ("answer" itself when at its root)
        self.reason = reason
        super().__init__(f"{field}: {reason}")


class ReplyTimeout(TaskError):
    """Nobody answered the task's question in time (``on_timeout="fail"``): not retried."""

    code = ErrorCode.REPLY_TIMEOUT


class AgentStopped(TaskError):
    """A middleware of the agent's chain ended its loop; retrying would end it the same way."""


class GuardrailDenied(AgentStopped):
    """The guardrail refused a tool call (or could not decide, and so refused)."""

    code = ErrorCode.GUARDRAIL_DENIED


class LoopDetected(AgentStopped):
    """The agent asked for the same tool with the same arguments too often."""

    code = ErrorCode.LOOP_DETECTED


class LimitExceeded(AgentStopped):
    """The task made more model calls or tool calls than its limits allow."""

    code = ErrorCode.LIMIT_EXCEEDED


class DelegationTooDeep(TaskError):
    """A delegation past ``delegation.max_depth`` levels of children: not retried."""

    code = ErrorCode.DELEGATION_TOO_DEEP
