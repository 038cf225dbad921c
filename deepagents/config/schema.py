"""Models of the YAML configuration file: tiers, strategies and agent settings."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from deepagents.config.gateway import GatewayConfig
from deepagents.config.middleware import (
    ContextBudgetConfig,
    MiddlewareEntry,
    OrderError,
    check_order,
)
from deepagents.config.models import BreakerConfig, ModelsSection
from deepagents.config.rollouts import RolloutConfig
from deepagents.config.slots import CronSlots, IntervalSlots, Slots, check_cron
from deepagents.config.webhooks import WEBHOOK_NAME_PATTERN, WebhookConfig
from deepagents.contract.task import AGENT_NAME_RE, INTENT_RE

TIER_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,15}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OverdueAction(StrEnum):
    ALERT = "alert"  # run it anyway, log and audit that it waited too long
    # The agent's degraded path (degraded_execute, else the last good answer for its
    # cache_key), else move it to the next (lower) tier; on the last tier: run it late.
    DEGRADE = "degrade"
    DROP = "drop"  # answer failed/dropped without running it


class FairShareConfig(_Strict):
    """A fair tier's options (``fair_share: {...}``; ``fair_share: true`` is all defaults)."""

    max_running_per_key: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="per shard: at most this many tasks of one fairness key running (or "
        "moved into the stream for a reader) at once; the key's next tasks wait their turn "
        "until one ends, while other keys go on (none: no cap)",
    )


class TierConfig(_Strict):
    concurrency: int = Field(ge=1, le=10_000, description="tasks of this tier run at once")
    max_wait_ms: int = Field(default=60_000, ge=1, description="queue wait before on_overdue")
    on_overdue: OverdueAction = OverdueAction.ALERT
    fair_share: FairShareConfig | None = Field(
        default=None,
        description="serve fairness keys (default: the tenant) round-robin by weight "
        "within the tier, instead of in submit order: `true`, or a mapping of options "
        "(`false` or absent: submit order)",
    )

    @field_validator("fair_share", mode="before")
    @classmethod
    def _fair_share_flag(cls, value: Any) -> Any:
        # `fair_share: true` is fair share with every option at its default. Here, not as
        # a union with bool: a bad option is then reported as itself.
        if isinstance(value, bool):
            return FairShareConfig() if value else None
        return value

    @property
    def max_running_per_key(self) -> int:
        """A fair tier's cap on one key's running tasks per shard; 0: none (or not fair)."""
        share = self.fair_share
        return share.max_running_per_key or 0 if share is not None else 0


def default_tiers() -> dict[str, TierConfig]:
    return {
        "p0": TierConfig(concurrency=20, max_wait_ms=1_000),
        "p1": TierConfig(concurrency=50, max_wait_ms=10_000),
        "p2": TierConfig(concurrency=100, max_wait_ms=120_000),
    }


class RetryPolicy(_Strict):
    """Exponential backoff with full jitter for failures that may pass."""

    base_ms: int = Field(default=200, ge=1)
    max_ms: int = Field(default=30_000, ge=1)
    multiplier: float = Field(default=2.0, ge=1.0, le=10.0)
    jitter: bool = True

    @model_validator(mode="after")
    def _bounds(self) -> RetryPolicy:
        if self.max_ms < self.base_ms:
            raise ValueError("max_ms must be >= base_ms")
        return self


# A Python class's name, bare or dotted with its module: names are matched, never imported.
ExceptionName = Annotated[
    str,
    StringConstraints(
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$", max_length=200
    ),
]


class AgentSettings(_Strict):
    """Per agent type; ``defaults`` in the file, overridden per agent."""

    shards: int = Field(default=4, ge=1, le=1024)
    max_deliveries: int = Field(default=5, ge=1, le=1000)
    visibility_timeout_ms: int = Field(default=30_000, ge=100)
    max_backlog: int = Field(
        default=100_000, ge=1, description="entries per stream before submit refuses"
    )
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    batch_size: int = Field(default=100, ge=1, le=1000)
    block_ms: int = Field(default=1_000, ge=1, le=60_000)
    reclaim_interval_ms: int | None = Field(
        default=None, ge=10, description="default: half the visibility timeout"
    )
    heartbeat_ms: int | None = Field(
        default=None, ge=10, description="default: a third of the visibility timeout"
    )
    liveness_ms: int = Field(
        default=750,
        ge=50,
        le=60_000,
        description="how often a worker writes its registry heartbeat (liveness, not its tasks')",
    )
    dead_after_ms: int = Field(
        default=2_250,
        ge=100,
        description="a worker whose registry heartbeat has not moved this long is dead: "
        "its pending entries are reclaimed at once, not after the visibility timeout",
    )
    consumer_idle_ms: int = Field(
        default=3_600_000,
        ge=1_000,
        description="a consumer idle this long with nothing pending is removed from its group",
    )
    grace_period_s: float = Field(default=20.0, ge=0)
    sync_threads: int = Field(default=32, ge=1, le=1024)
    answer_cache_ttl_s: int = Field(
        default=3_600,
        ge=1,
        le=7 * 86_400,
        description="how long a good answer stands in for degrade (agents with cache_key)",
    )
    max_state_bytes: int = Field(
        default=262_144,
        ge=64,
        le=64 << 20,
        description="a checkpoint's encoded state above this fails the task state_too_large",
    )
    step_inline_bytes: int = Field(
        default=65_536,
        ge=64,
        le=16 << 20,
        description="a step record above this goes to PostgreSQL (a claim check in Redis)",
    )
    # Exception types by name ("KeyError", or "package.module.Class" to be exact): a
    # failure of one is never retried, or always retried (docs/retries.md).
    non_retryable: tuple[ExceptionName, ...] = Field(
        default=(), max_length=100, description="exception types that end the task at once"
    )
    always_retry: tuple[ExceptionName, ...] = Field(
        default=(), max_length=100, description="exception types retried up to max_deliveries"
    )

    @model_validator(mode="after")
    def _a_few_missed_beats(self) -> AgentSettings:
        if self.dead_after_ms < 2 * self.liveness_ms:
            raise ValueError(
                "dead_after_ms must be at least twice liveness_ms (a few missed beats)"
            )
        return self

    @model_validator(mode="after")
    def _one_verdict_per_type(self) -> AgentSettings:
        both = sorted(set(self.non_retryable) & set(self.always_retry))
        if both:
            raise ValueError(
                f"non_retryable: {', '.join(both)} also listed in always_retry (choose one)"
            )
        return self


class RemoteTLS(_Strict):
    """Files for HTTPS to a remote agent: a CA bundle to trust, a client certificate."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    @model_validator(mode="after")
    def _pair(self) -> RemoteTLS:
        if self.key is not None and self.cert is None:
            raise ValueError("key needs cert")
        return self


class RemoteBreakerConfig(BreakerConfig):
    """The fleet's circuit breaker for one remote service: the model-call breaker's settings
    (it is the same breaker), and how long a task may wait while it is open."""

    max_wait_s: float = Field(
        default=3600.0,
        gt=0,
        description="a task waits for an open circuit until its deadline and at most this "
        "long after it was created; then a refusal counts as a failed delivery",
    )


class RemoteBatchConfig(_Strict):
    """How a remote agent's tasks share requests when its service implements ``run_batch``
    (docs/remote-agents.md): a batch leaves when it holds ``max_tasks`` or ``max_wait_ms``
    after its first task, whichever comes first, once fewer than ``max_requests`` batches
    are in flight. Each task keeps its own delivery."""

    max_tasks: int = Field(
        default=32, ge=1, le=1000, description="tasks per request at most; 1: one call per task"
    )
    max_wait_ms: float = Field(
        default=0.0,
        ge=0,
        le=1000,
        description="the longest a task waits for others to share its request; 0: only "
        "those ready at the same instant (the event loop's turn) share it",
    )
    max_requests: int = Field(
        default=2,
        ge=1,
        le=1000,
        description="batches in flight at once; while all are, the next one keeps gathering "
        "tasks (up to max_tasks) and leaves when one returns",
    )


class RemotePullConfig(_Strict):
    """Pull mode (docs/remote-agents.md): the worker serves ``POST /v1/lease`` and
    ``POST /v1/complete`` on ``listen``, and the service asks it for tasks."""

    listen: str = Field(
        pattern=r"^([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):\d{1,5}$",
        description="host:port the worker serves the lease calls on (port 0: any free one, "
        "printed in the worker's log); one worker process per address",
    )
    token_from_env: str = Field(
        min_length=1,
        description="environment variable holding the token a puller must send as "
        "'authorization: Bearer <token>'; a call without it is refused",
    )
    lease_s: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="how long a puller holds a leased task: past it (or the task's deadline, "
        "if sooner) the worker takes the task back and retries it, and refuses its completion",
    )
    max_wait_ms: int = Field(
        default=30_000, ge=0, le=300_000, description="the longest one lease call waits"
    )


class RemoteConfig(_Strict):
    """An agent served over HTTP (docs/remote-agents.md). The URL comes only from here:
    nothing in a task can steer where the worker connects. In pull mode there is no URL:
    the service connects to the worker (``pull``)."""

    protocol: Literal["deepagents", "a2a"] = Field(
        default="deepagents",
        description="deepagents: the wire protocol of docs/remote-agents.md (HTTP or gRPC); "
        "a2a: an A2A agent (JSON-RPC binding) at url, its card at url + "
        "/.well-known/agent-card.json (the a2a extra)",
    )
    mode: Literal["push", "pull"] = Field(
        default="push",
        description="push: the worker calls the service at url; pull: the service asks the "
        "worker for tasks (the pull section)",
    )
    url: str = Field(
        default="",
        pattern=r"^(https?://[^/?#\s]+(/[^?#\s]*)?|grpcs?://[^/?#\s]+)?$",
        description="base URL: http(s)://host[:port][/path], or grpc(s)://host:port for "
        "gRPC (the grpc extra); required in push mode, none in pull mode",
    )
    pull: RemotePullConfig | None = None
    timeout_s: float = Field(default=30.0, gt=0, le=3600, description="per call, at most")
    max_connections: int = Field(default=100, ge=1, le=10_000)
    max_response_bytes: int = Field(default=1_048_576, ge=1024, le=1 << 30)
    max_retry_after_s: float = Field(
        default=300.0,
        gt=0,
        le=86_400,
        description="the longest a service's Retry-After may delay a task's next attempt",
    )
    headers_from_env: dict[str, str] = Field(
        default_factory=dict, description="header name -> environment variable holding its value"
    )
    tls: RemoteTLS | None = None
    breaker: RemoteBreakerConfig = Field(default_factory=RemoteBreakerConfig)
    batch: RemoteBatchConfig = Field(default_factory=RemoteBatchConfig)
    ask_timeout_s: float = Field(
        default=86_400.0,
        gt=0,
        description="a2a: how long a question the agent asks (input-required) waits for a "
        "reply through ctx.ask before the task fails reply_timeout",
    )

    @model_validator(mode="after")
    def _a2a_over_http(self) -> RemoteConfig:
        if self.protocol == "a2a" and not self.url.startswith("http"):
            raise ValueError("protocol a2a needs an http(s):// url")
        return self

    @model_validator(mode="after")
    def _mode_coherent(self) -> RemoteConfig:
        if self.mode == "push" and not self.url:
            raise ValueError("push mode needs a url")
        if self.mode == "pull":
            if self.url or self.pull is None:
                raise ValueError("pull mode takes a pull section (listen, token_from_env), no url")
            if self.protocol != "deepagents":
                raise ValueError("pull mode speaks the deepagents protocol only")
        elif self.pull is not None:
            raise ValueError("a pull section needs mode: pull")
        return self


class McpToolPolicy(_Strict):
    """What the runtime may do with one MCP tool's calls (``deepagents.tools.ToolPolicy``):
    only ``read_only`` or ``idempotent`` tools are retried; ``destructive`` asks approval."""

    read_only: bool = False
    idempotent: bool = False
    destructive: bool = False
    timeout_s: float = Field(default=30.0, gt=0, le=3600, description="one attempt, at most")
    retries: int = Field(default=2, ge=0, le=10, description="for read_only/idempotent tools")

    @model_validator(mode="after")
    def _coherent(self) -> McpToolPolicy:
        if self.read_only and self.destructive:
            raise ValueError("a tool cannot be both read_only and destructive")
        return self


class McpServerConfig(_Strict):
    """One MCP server an agent uses (docs/tools.md): a command started over stdio, or a
    streamable-HTTP URL. Its tools' policies: ``default``, overridden per tool by name."""

    command: str | None = Field(default=None, min_length=1)
    args: tuple[str, ...] = ()
    cwd: str | None = None
    env_from_env: dict[str, str] = Field(
        default_factory=dict,
        description="the server's environment variable -> the worker's variable holding it",
    )
    url: str | None = Field(default=None, pattern=r"^https?://[^/?#\s]+(/[^?#\s]*)?$")
    headers_from_env: dict[str, str] = Field(
        default_factory=dict, description="header name -> environment variable holding its value"
    )
    connect_timeout_s: float = Field(default=10.0, gt=0, le=600)
    default: McpToolPolicy = Field(default_factory=McpToolPolicy)
    tools: dict[str, McpToolPolicy] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (stdio) or url (streamable HTTP)")
        return self


class AgentEntry(_Strict):
    """One agent type. ``class`` is ``module:Class``; ``intents`` may add to the class's own.
    ``remote`` instead of ``class`` serves it over HTTP."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    class_path: str | None = Field(default=None, alias="class")
    intents: tuple[str, ...] = ()
    settings: dict[str, Any] = Field(default_factory=dict)
    remote: RemoteConfig | None = None
    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    middleware: tuple[MiddlewareEntry, ...] = Field(
        default=(), description="the agent's middleware chain, outermost first (docs/tools.md)"
    )

    @field_validator("middleware")
    @classmethod
    def _middleware_order(cls, value: tuple[MiddlewareEntry, ...]) -> tuple[MiddlewareEntry, ...]:
        try:
            check_order([entry.name for entry in value])
        except OrderError as exc:
            raise ValueError(f"{exc.field}: {exc.reason}") from exc
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> AgentEntry:
        if self.class_path is not None and self.remote is not None:
            raise ValueError("give either class or remote, not both")
        return self

    @field_validator("class_path")
    @classmethod
    def _class_path(cls, value: str | None) -> str | None:
        if value is not None and (value.count(":") != 1 or not all(value.split(":"))):
            raise ValueError("must be 'module.path:ClassName'")
        return value


def _settings_error(agent: str, exc: ValidationError) -> PydanticCustomError:
    """An agent's settings refused, as one line naming the field (``agents.<name>.settings.
    non_retryable[1]: ...``); a custom error, so pydantic adds no "Value error," to it."""
    first = exc.errors(include_url=False)[0]
    where = f"agents.{agent}.settings"
    for part in first["loc"]:
        where += f"[{part}]" if isinstance(part, int) else f".{part}"
    reason = first["msg"].removeprefix("Value error, ")
    return PydanticCustomError(
        "agent_settings", "{where}: {reason}", {"where": where, "reason": reason}
    )


class Strategy(_Strict):
    """A routing rule: when ``match`` holds, the task goes to ``tier``."""

    name: str = Field(min_length=1, max_length=64)
    match: dict[str, Any]
    tier: str


class AsksConfig(_Strict):
    """Questions a task asks a person (``ctx.ask``, docs/long-running.md)."""

    escalation_intent: str | None = Field(
        default=None,
        pattern=INTENT_RE.pattern,
        description='on_timeout="escalate": the intent of the task submitted, carrying the '
        "question and the waiting task's id, when a question's wait runs out",
    )


class DelegationConfig(_Strict):
    """Tasks that delegate to child tasks (``ctx.delegate``, docs/long-running.md)."""

    max_depth: int = Field(
        default=4,
        ge=1,
        le=64,
        description="how deep children may nest (a task submitted from outside is depth 0); "
        "a delegation past it fails with delegation_too_deep",
    )
    sweep_s: float = Field(
        default=30.0,
        gt=0,
        le=86_400,
        description="how often a parent's shard checks its unfinished children again, to "
        "deliver an end a crash lost between the child's commit and the parent's wake-up",
    )


SCHEDULE_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,32}$"


class CatchUp(StrEnum):
    """What a leader does with the slots that passed while no scheduler led."""

    SKIP = "skip"  # none of them: the next slot fires on time
    LAST = "last"  # the newest one only
    ALL = "all"  # every one within catch_up_window_s, oldest first


class Overlap(StrEnum):
    """What a slot does while the task of the slot before it has not ended."""

    ALLOW = "allow"  # fire anyway
    SKIP = "skip"  # not fired (counted as skipped)
    BUFFER_ONE = "buffer_one"  # held, and fired once that task ends; a second one is skipped


class ScheduleConfig(_Strict):
    """A recurring task (docs/scheduling.md): one task per slot of ``every_s``."""

    intent: str = Field(pattern=INTENT_RE.pattern)
    payload: dict[str, Any] = Field(default_factory=dict)
    tenant: str | None = Field(default=None, min_length=1, max_length=128)
    priority: int | None = Field(default=None, ge=0, le=9)
    every_s: float | None = Field(
        default=None,
        ge=1,
        le=31 * 86_400,
        description="slots at whole multiples of this since the epoch (or cron)",
    )
    cron: str | None = Field(
        default=None,
        max_length=200,
        description="slots at the times this names in timezone (five fields; the [cron] extra)",
    )
    timezone: str = Field(default="UTC", max_length=64, description="an IANA zone, for cron")
    catch_up: CatchUp = CatchUp.LAST
    catch_up_window_s: float = Field(
        default=3600, gt=0, le=7 * 86_400, description="catch_up all: how far back"
    )
    overlap: Overlap = Overlap.ALLOW
    jitter_s: float = Field(
        default=0,
        ge=0,
        le=3600,
        description="each slot's task runs up to this much after the slot (the same delay "
        "for a slot whichever scheduler fires it)",
    )

    @model_validator(mode="after")
    def _one_rhythm(self) -> ScheduleConfig:
        if (self.every_s is None) == (self.cron is None):
            raise ValueError("give every_s or cron, one of them")
        if self.every_s is not None and self.jitter_s >= self.every_s:
            raise ValueError("jitter_s must be below every_s (a slot's task before the next)")
        if self.cron is not None:
            check_cron(self.cron, self.timezone)
        return self

    def slots(self) -> Slots:
        if self.cron is not None:
            return CronSlots(self.cron, self.timezone)
        assert self.every_s is not None  # _one_rhythm
        return IntervalSlots(int(self.every_s * 1000))


class FileConfig(_Strict):
    tiers: dict[str, TierConfig] = Field(default_factory=default_tiers)
    default_tier: str | None = None
    defaults: AgentSettings = Field(default_factory=AgentSettings)
    agents: dict[str, AgentEntry] = Field(default_factory=dict)
    strategies: list[Strategy] = Field(default_factory=list)
    models: ModelsSection = Field(default_factory=dict)
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    rollouts: dict[str, RolloutConfig] = Field(default_factory=dict)
    asks: AsksConfig = Field(default_factory=AsksConfig)
    delegation: DelegationConfig = Field(default_factory=DelegationConfig)
    schedules: dict[str, ScheduleConfig] = Field(default_factory=dict)
    webhooks: dict[str, WebhookConfig] = Field(default_factory=dict)

    @field_validator("webhooks")
    @classmethod
    def _webhook_names(cls, webhooks: dict[str, WebhookConfig]) -> dict[str, WebhookConfig]:
        for name in webhooks:
            if not re.match(WEBHOOK_NAME_PATTERN, name):
                raise ValueError(
                    f"webhook name {name!r} must be 1-64 of A-Z a-z 0-9 _ - (it names a stream)"
                )
        return webhooks

    @field_validator("schedules")
    @classmethod
    def _schedule_names(cls, schedules: dict[str, ScheduleConfig]) -> dict[str, ScheduleConfig]:
        for name in schedules:
            if not re.match(SCHEDULE_NAME_PATTERN, name):
                raise ValueError(
                    f"schedule name {name!r} must be 1-32 of A-Z a-z 0-9 _ - (it names its tasks)"
                )
        return schedules

    @field_validator("tiers")
    @classmethod
    def _tier_names(cls, tiers: dict[str, TierConfig]) -> dict[str, TierConfig]:
        if not tiers:
            raise ValueError("at least one tier is needed")
        for name in tiers:
            if not re.match(TIER_NAME_PATTERN, name):
                raise ValueError(f"tier name {name!r} must match {TIER_NAME_PATTERN}")
        return tiers

    @field_validator("agents")
    @classmethod
    def _agent_names(cls, agents: dict[str, AgentEntry]) -> dict[str, AgentEntry]:
        for name in agents:
            if not AGENT_NAME_RE.match(name):
                raise ValueError(
                    f"agent name {name!r} must be 1-64 of a-z 0-9 _ - (it becomes a Redis key)"
                )
        return agents

    @model_validator(mode="after")
    def _references(self) -> FileConfig:
        if self.default_tier is not None and self.default_tier not in self.tiers:
            raise ValueError(f"default_tier {self.default_tier!r} is not a configured tier")
        for i, strategy in enumerate(self.strategies):
            if strategy.tier not in self.tiers:
                raise ValueError(
                    f"strategies[{i}] ({strategy.name}): unknown tier {strategy.tier!r}"
                )
        names = [s.name for s in self.strategies]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate strategy names: {', '.join(dupes)}")
        unknown = sorted(set(self.rollouts) - set(self.agents))
        if unknown and self.agents:
            raise ValueError(f"rollouts for unknown agents: {', '.join(unknown)}")
        for name, entry in self.agents.items():
            for i, used in enumerate(entry.middleware):
                model = used.model if isinstance(used, ContextBudgetConfig) else None
                if model is not None and model not in self.models:
                    where = f"agents.{name}.middleware[{i}].model"
                    raise ValueError(f"{where}: unknown model {model!r}")
            try:
                AgentSettings.model_validate({**self.defaults.model_dump(), **entry.settings})
            except ValidationError as exc:
                raise _settings_error(name, exc) from exc
        return self

    def versioned(self, agent: str) -> bool:
        """Under a rollout: its tasks go to per-version streams (docs/rollouts.md)."""
        return agent in self.rollouts

    @property
    def tier_names(self) -> tuple[str, ...]:
        return tuple(self.tiers)

    @property
    def fallback_tier(self) -> str:
        return self.default_tier or self.tier_names[-1]

    def agent_settings(self, agent: str) -> AgentSettings:
        entry = self.agents.get(agent)
        if entry is None or not entry.settings:
            return self.defaults
        return AgentSettings.model_validate({**self.defaults.model_dump(), **entry.settings})
