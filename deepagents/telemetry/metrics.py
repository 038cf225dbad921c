"""Every Prometheus metric of deepagents, defined once, prefix ``deepagents_``.

Label values come only from the configuration (agent names, tiers, shards, model names) and
from small fixed sets (statuses, outcomes, token kinds): never a task id, a tenant or a
prompt, so the number of series does not grow with traffic.

Two owners, because they live in different processes:
- :class:`Metrics`: what one process observes (submits, task outcomes and timings, in-flight
  work, health checks, model calls). Each worker and the gateway serve their own.
- :class:`FleetMetrics`: stream-level gauges sampled from Redis by ``deepagents exporter``
  only, so N workers do not export N copies of the same backlog.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import Metric

from deepagents.telemetry.histogram import TASK_BUCKETS, FastHistogram, HistogramChild

TASK_STATUSES = (
    "success",
    "partial",
    "failed",
    "retried",
    "waited",  # an open circuit: rescheduled without counting a delivery
    "degraded",
    "dead_lettered",
    "parked",  # waits for a person's reply, holding no slot
)
SUBMIT_STATUSES = ("accepted", "duplicate", "overloaded")
MODEL_CALL_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
CIRCUIT_STATES = {"closed": 0, "half_open": 1, "open": 2}


class TierMetrics:
    """The children one (agent, tier) uses per task, bound once: no label lookups per task."""

    __slots__ = ("completed", "execution", "latency", "queue_wait")

    def __init__(self, metrics: Metrics, agent: str, tier: str) -> None:
        self.queue_wait: HistogramChild = metrics.queue_wait.labels(agent, tier)
        self.execution: HistogramChild = metrics.execution.labels(agent, tier)
        self.latency: HistogramChild = metrics.latency.labels(agent, tier)
        self.completed = {s: metrics.completed.labels(agent, tier, s) for s in TASK_STATUSES}

    def observe(self, wait_s: float, run_s: float) -> None:
        """One delivery's queue wait, its run (start to commit) and their sum."""
        self.observe_many([wait_s], [run_s])

    def observe_many(self, waits: list[float], runs: list[float]) -> None:
        """``observe`` for a batch of deliveries: three calls per batch, not per task."""
        self.queue_wait.observe_many(waits)
        self.execution.observe_many(runs)
        self.latency.observe_many(list(map(operator.add, waits, runs)))


class Metrics:
    """The metrics of one process, in a registry this object owns (never the global one)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        at = ("agent", "tier")
        self.submitted = Counter(
            "deepagents_tasks_submitted", "Tasks submitted by agent, tier and status",
            (*at, "status"), registry=r,
        )  # fmt: skip
        self.completed = Counter(
            "deepagents_tasks_completed",
            "Deliveries finished by agent, tier and status (a retry or tier move is counted "
            "when it is scheduled)",
            (*at, "status"), registry=r,
        )  # fmt: skip
        self.queue_wait = FastHistogram(
            "deepagents_task_queue_wait_seconds", "Enqueue to start of a delivery", at, registry=r
        )
        self.execution = FastHistogram(
            "deepagents_task_execution_seconds", "Start of a delivery to its outcome", at,
            registry=r,
        )  # fmt: skip
        self.latency = FastHistogram(
            "deepagents_task_latency_seconds", "Enqueue to outcome (queue wait + execution)", at,
            registry=r,
        )  # fmt: skip
        self.in_flight = Gauge("deepagents_tasks_in_flight", "Tasks running now", at, registry=r)
        self.health_checks = Counter(
            "deepagents_agent_health_checks", "health_check() calls by agent", ("agent",),
            registry=r,
        )  # fmt: skip
        self.health_checks_healthy = Counter(
            "deepagents_agent_health_checks_healthy", "health_check() calls that passed",
            ("agent",), registry=r,
        )  # fmt: skip
        self.agent_healthy = Gauge(
            "deepagents_agent_healthy", "Result of this process's last health_check() (1/0)",
            ("agent",), registry=r,
        )  # fmt: skip
        self.decode_errors = Counter(
            "deepagents_decode_errors",
            "Malformed members moved aside (dead-lettered or skipped) instead of read, by agent "
            "and structure: stream, delayed (set), registry (hash), waiting (index)",
            ("agent", "structure"), registry=r,
        )  # fmt: skip
        self.overdue = Counter(
            "deepagents_tasks_overdue",
            "Tasks that waited longer than their tier's max_wait_ms, by the action taken "
            "(alert, degrade, drop)",
            (*at, "action"), registry=r,
        )  # fmt: skip
        self.human_wait = FastHistogram(
            "deepagents_human_wait_seconds",
            "A question's age when it was answered (outcome replied) or its wait ran out "
            "(timeout), by agent",
            ("agent", "outcome"), buckets=HUMAN_WAIT_BUCKETS, registry=r,
        )  # fmt: skip
        self.model = ModelCallMetrics(r)
        self.tool = ToolCallMetrics(r)
        self.rollout = RolloutMetrics(r)
        self.rollout_rerouted = self.rollout.rerouted
        self.steps = StepMetrics(r)
        self.schedule = ScheduleMetrics(r)

    def tier(self, agent: str, tier: str) -> TierMetrics:
        return TierMetrics(self, agent, tier)

    def track_in_flight(self, agent: str, tier: str, read: Callable[[], float]) -> None:
        """In-flight work is read at scrape time: nothing to update on the hot path."""
        self.in_flight.labels(agent, tier).set_function(read)

    def health(self, agent: str, ok: bool) -> None:
        self.health_checks.labels(agent).inc()
        if ok:
            self.health_checks_healthy.labels(agent).inc()
        self.agent_healthy.labels(agent).set(1 if ok else 0)


class ModelCallMetrics:
    """Model calls, filled from the model-call layer's attempt records (see ``modelcalls``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.calls = Counter(
            "deepagents_model_calls", "Model call attempts by model and outcome",
            ("model", "outcome"), registry=r,
        )  # fmt: skip
        self.duration = FastHistogram(
            "deepagents_model_call_seconds", "Model call attempt latency", ("model",),
            buckets=MODEL_CALL_BUCKETS, registry=r,
        )  # fmt: skip
        self.tokens = Counter(
            "deepagents_model_call_tokens", "Tokens by model and kind (input/output)",
            ("model", "kind"), registry=r,
        )  # fmt: skip
        self.cost = Counter(
            "deepagents_model_call_cost_usd", "Model spend from the price table, USD",
            ("model", "agent"), registry=r,
        )  # fmt: skip
        self.retries = Counter(
            "deepagents_model_call_retries", "Model call attempts that were retries", ("model",),
            registry=r,
        )  # fmt: skip
        self.circuit = Gauge(
            "deepagents_model_circuit_state",
            "Circuit breaker state as this process last saw it: 0 closed, 1 half-open, 2 open",
            ("model",), registry=r,
        )  # fmt: skip

    def circuit_state(self, model: str, state: str) -> None:
        self.circuit.labels(model).set(CIRCUIT_STATES.get(state, 0))


class ToolCallMetrics:
    """Tool calls through ``wrap_tool_call`` (deepagents.tools), one count per call (its
    retries inside), by agent, tool and outcome (ok, or the ErrorCode it ended with)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.calls = Counter(
            "deepagents_tool_calls", "Tool calls by agent, tool and outcome",
            ("agent", "tool", "outcome"), registry=r,
        )  # fmt: skip
        self.duration = FastHistogram(
            "deepagents_tool_call_seconds", "Tool call latency, retries included",
            ("agent", "tool"), buckets=MODEL_CALL_BUCKETS, registry=r,
        )  # fmt: skip


class RolloutMetrics:
    """Task outcomes by agent version. ``version`` is one of the rollout's configured
    versions, else ``other``: bounded however many builds a fleet runs."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r, av = registry, ("agent", "version")
        self.tasks = Counter(
            "deepagents_version_tasks", "Committed outcomes by agent version (ok or error)",
            (*av, "outcome"), registry=r,
        )  # fmt: skip
        self.latency = FastHistogram(
            "deepagents_version_task_latency_seconds",
            "Start of a delivery to its commit, by agent version", av, registry=r,
        )  # fmt: skip
        self.rerouted = Counter(
            "deepagents_rollout_rerouted",
            "New tasks the weights gave a version with no live worker, sent to the other",
            av, registry=r,
        )  # fmt: skip


class RolloutFleetMetrics:
    """Set by the rollout controller (one per fleet) from the shared state."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r, av = registry, ("agent", "version")
        self.weight = Gauge(
            "deepagents_rollout_canary_weight", "The canary's share of new tasks (0..1)",
            ("agent",), registry=r,
        )  # fmt: skip
        self.live = Gauge(
            "deepagents_rollout_live_workers",
            "Workers of a rollout's version with a fresh heartbeat", av, registry=r,
        )  # fmt: skip
        self.error_rate = Gauge(
            "deepagents_rollout_error_rate", "Error rate over the controller's window", av,
            registry=r,
        )  # fmt: skip
        self.p95 = Gauge(
            "deepagents_rollout_p95_seconds", "p95 latency over the controller's window", av,
            registry=r,
        )  # fmt: skip
        self.samples = Gauge(
            "deepagents_rollout_samples", "Committed tasks in the controller's window", av,
            registry=r,
        )  # fmt: skip
        self.decisions = Counter(
            "deepagents_rollout_decisions", "Controller decisions by kind",
            ("agent", "decision"), registry=r,
        )  # fmt: skip
        self.leader = Gauge(
            "deepagents_rollout_controller_leader", "1 while this controller holds the lease",
            registry=r,
        )  # fmt: skip


# A slot fires within a tick (0.2 s) when a leader is up; a catch-up, hours late.
SCHEDULE_LATENESS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15, 60, 300, 3600)


class ScheduleMetrics:
    """Set by the scheduler that leads (``deepagents scheduler --metrics-port``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.firings = Counter(
            "deepagents_schedule_firings",
            "Slots of a recurring schedule by outcome: fired, duplicate (another leader "
            "fired it), skipped (catch-up, overlap or paused), buffered (overlap buffer_one)",
            ("schedule", "outcome"), registry=r,
        )  # fmt: skip
        self.lateness = FastHistogram(
            "deepagents_schedule_lateness_seconds",
            "How long after its slot a slot's task was submitted (before its jitter)",
            ("schedule",), buckets=SCHEDULE_LATENESS_BUCKETS, registry=r,
        )  # fmt: skip


STEP_OUTCOMES = ("completed", "replayed")


class PhaseChildren(NamedTuple):
    completed: Any
    replayed: Any
    duration: HistogramChild


STATE_BUCKETS = (256, 1024, 4096, 16_384, 65_536, 262_144, 1_048_576, 4_194_304)
# A phase is a label: an agent naming phases after data (a task id, a URL) would grow the
# series without bound, so past this many per agent the rest are counted as "other".
MAX_PHASES = 32


class StepMetrics:
    """Durable steps (worker/steps.py): steps by outcome and phase, their latency,
    checkpoint sizes, deliveries that resumed past completed steps, refused writes."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r, ap = registry, ("agent", "phase")
        self.steps = Counter(
            "deepagents_steps",
            "Steps by agent, phase and outcome (completed: ran and recorded; replayed: "
            "an earlier delivery's recorded result returned without running)",
            (*ap, "outcome"), registry=r,
        )  # fmt: skip
        self.duration = FastHistogram(
            "deepagents_step_seconds", "A step's run and record, completed steps only", ap,
            registry=r,
        )  # fmt: skip
        self.checkpoint_bytes = FastHistogram(
            "deepagents_checkpoint_bytes", "Encoded size of each checkpoint recorded",
            ("agent",), buckets=STATE_BUCKETS, registry=r,
        )  # fmt: skip
        self.resumes = Counter(
            "deepagents_task_resumes",
            "Deliveries that found steps completed by an earlier one (after a crash, a "
            "reclaim or a retry)", ("agent",), registry=r,
        )  # fmt: skip
        self.refused = Counter(
            "deepagents_step_writes_refused",
            "Step or checkpoint records refused: this worker no longer owned the entry",
            ("agent",), registry=r,
        )  # fmt: skip
        self._phases: dict[str, set[str]] = {}
        self._bound: dict[tuple[str, str], PhaseChildren] = {}

    def bound(self, agent: str, phase: str) -> PhaseChildren:
        """The children of one (agent, phase), bound once: steps are on the hot path."""
        found = self._bound.get((agent, phase))
        if found is None:
            label = self.phase(agent, phase)
            found = self._bound[(agent, phase)] = PhaseChildren(
                self.steps.labels(agent, label, "completed"),
                self.steps.labels(agent, label, "replayed"),
                self.duration.labels(agent, label),
            )
        return found

    def phase(self, agent: str, phase: str) -> str:
        """The label value for ``phase``: itself, or "other" past MAX_PHASES."""
        seen = self._phases.setdefault(agent, set())
        if phase in seen:
            return phase
        if len(seen) < MAX_PHASES:
            seen.add(phase)
            return phase
        return "other"


STREAM_LABELS = ("stream", "group", "agent", "tier", "shard")
# A person answers in seconds to days.
HUMAN_WAIT_BUCKETS = (1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 86_400, 7 * 86_400)


class FleetMetrics:
    """Stream-level gauges: set by the exporter from one sample of Redis."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r, sl = self.registry, STREAM_LABELS
        self.length = Gauge("deepagents_stream_length", "Entries in the stream", sl, registry=r)
        self.fair_queue = Gauge(
            "deepagents_stream_fair_queue",
            "A fair tier's tasks still waiting in its fair queue (and, with a per-key cap, "
            "for a slot), ahead of the stream",
            sl,
            registry=r,
        )  # fmt: skip
        self.pending = Gauge(
            "deepagents_stream_pending_messages", "Delivered, not yet acknowledged", sl,
            registry=r,
        )  # fmt: skip
        self.lag = Gauge(
            "deepagents_stream_consumer_lag", "Entries not yet delivered to the group", sl,
            registry=r,
        )  # fmt: skip
        self.oldest_pending = Gauge(
            "deepagents_stream_oldest_pending_age_seconds",
            "Idle time of the oldest pending entry (heartbeats reset it; a dead worker's grow)",
            sl, registry=r,
        )  # fmt: skip
        self.max_wait = Gauge(
            "deepagents_tier_max_wait_seconds", "The tier's configured max_wait_ms, in seconds",
            ("tier",), registry=r,
        )  # fmt: skip
        shard = ("agent", "shard")
        self.dead_letters = Gauge(
            "deepagents_dead_letters", "Entries in the shard's dead-letter stream", shard,
            registry=r,
        )  # fmt: skip
        self.delayed = Gauge(
            "deepagents_delayed_tasks", "Retries and tier moves waiting in the delayed set",
            shard, registry=r,
        )  # fmt: skip
        self.waiting = Gauge(
            "deepagents_waiting_tasks", "Tasks waiting for a person's reply (no slot held)",
            shard, registry=r,
        )  # fmt: skip
        self.audit_backlog = Gauge(
            "deepagents_audit_outbox_backlog", "Audit events waiting in the outbox streams",
            ("agent",), registry=r,
        )  # fmt: skip
        self.webhook_backlog = Gauge(
            "deepagents_webhook_backlog", "Webhook deliveries the endpoint has not taken yet",
            ("endpoint",), registry=r,
        )  # fmt: skip
        self.webhook_failing = Gauge(
            "deepagents_webhook_failing_seconds",
            "How long the endpoint has refused or missed its current delivery (0: healthy)",
            ("endpoint",), registry=r,
        )  # fmt: skip
        self.readers = Gauge(
            "deepagents_stream_readers",
            "Live worker instances reading the stream (--tiers, --shards); 0: its tasks wait",
            ("agent", "tier", "shard"), registry=r,
        )  # fmt: skip
        agent = ("agent",)
        self.instances = Gauge(
            "deepagents_agent_instances", "Registered worker instances (not yet forgotten)",
            agent, registry=r,
        )  # fmt: skip
        self.instances_healthy = Gauge(
            "deepagents_agent_instances_healthy",
            "Instances with a fresh heartbeat whose last health_check() passed", agent,
            registry=r,
        )  # fmt: skip
        self.health_ratio = Gauge(
            "deepagents_agent_health_ratio",
            "Healthy instances / live instances (0 with none live)", agent, registry=r,
        )  # fmt: skip
        self.live_instances = Gauge(
            "deepagents_agent_live_instances",
            "Instances whose registry heartbeat is within dead_after_ms", agent, registry=r,
        )  # fmt: skip
        self.model_budget = Gauge(
            "deepagents_model_daily_budget_usd", "A model's configured daily budget, USD",
            ("model",), registry=r,
        )  # fmt: skip
        self.scrape_errors = Counter(
            "deepagents_exporter_sample_errors", "Samples of Redis that failed", registry=r
        )
        self.sample_seconds = Gauge(
            "deepagents_exporter_sample_seconds", "Duration of the last sample of Redis",
            registry=r,
        )  # fmt: skip
        self.rollout = RolloutFleetMetrics(r)


def sample_names(families: Iterable[Metric]) -> set[str]:
    """Names a family exposes in the text format (``_total``, ``_bucket``, ...)."""
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "gauge": ("",),
    }
    out: set[str] = set()
    for family in families:
        for suffix in suffixes.get(family.type, ("",)):
            out.add(family.name + suffix)
    return out


def catalogue() -> set[str]:
    """Every sample name the code can export (the dashboard and alert tests check against it).
    Families without children are still collected, so this needs no traffic."""
    metrics, fleet = Metrics(), FleetMetrics()
    return sample_names([*metrics.registry.collect(), *fleet.registry.collect()])


__all__ = [
    "TASK_BUCKETS",
    "FleetMetrics",
    "Metrics",
    "ModelCallMetrics",
    "RolloutFleetMetrics",
    "RolloutMetrics",
    "ScheduleMetrics",
    "StepMetrics",
    "TierMetrics",
]
