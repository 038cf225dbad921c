"""The message-bus interface the scheduling layer is written against.

Redis Streams is the first implementation (``transport.redis_streams``); another
backend implements the same methods and nothing above this layer changes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple, Protocol

from deepagents.contract.events import AuditEvent
from deepagents.transport.keys import ShardKeys
from deepagents.transport.states import (
    AnswerStatus,
    Cancelled,
    Enqueued,
    Outcome,
    Replayed,
    TaskState,
    WakeStatus,
)


def now_ms() -> int:
    """Wall-clock milliseconds, the unit of every timestamp the bus writes."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class StreamRef:
    """One tier stream of one shard."""

    keys: ShardKeys
    tier: str
    # Built once: the stream's key is read several times per task.
    name: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", self.keys.stream(self.tier))

    def __hash__(self) -> int:
        # A key of per-stream dicts on the hot path; the name is unique per (keys, tier)
        # and its hash is cached, where the generated one hashes the nested fields.
        return hash(self.name)


# The per-task records below are NamedTuples, not frozen dataclasses: built for every
# task, and a frozen dataclass sets each field through object.__setattr__.


class Fairness(NamedTuple):
    """A task's share of its tier when the tier is fair (``fair_share``): its key's queue
    is served round-robin with the others', ``weight`` times as often as a key of weight 1."""

    key: str
    weight: float = 1.0
    # The tier's ``max_running_per_key`` (0: none): at most this many of the key's tasks
    # hold a slot (moved into the stream, not ended yet) per shard.
    cap: int = 0


class RawEntry(NamedTuple):
    """An entry as read; ``fields`` is None when its body was deleted (payload lost)."""

    entry_id: str
    fields: dict[bytes, bytes] | None


@dataclass(frozen=True, slots=True)
class ReclaimCursor:
    """Where a pass of reclaims over a stream's pending entries goes on; opaque above the
    transport. A pass starts at ``RECLAIM_START`` and has covered every pending entry when
    the cursor a reclaim hands back is ``at_start`` again."""

    position: str = "0-0"

    @property
    def at_start(self) -> bool:
        return self.position == "0-0"


RECLAIM_START = ReclaimCursor()


@dataclass(frozen=True, slots=True)
class Claimed:
    entries: list[RawEntry]
    deleted: list[str]  # ids the server dropped from the PEL because the body is gone
    cursor: ReclaimCursor


class Enqueue(NamedTuple):
    """One task to enqueue: its JSON onto ``stream``, with the channel to notify of its
    result (``reply``, '' for none) and its ``submitted`` audit events. A
    NamedTuple, as the other per-task records: a frozen dataclass built for every submitted
    task cost the producer 4-5% more instructions per enqueue (docs/benchmarks.md)."""

    stream: StreamRef
    task_id: str
    task_json: bytes
    reply: str = ""
    events: Sequence[AuditEvent] = ()


class Admitted(NamedTuple):
    """What the enqueue did with one task, and its entry id ('' when refused, or held in
    the delayed set until due)."""

    status: Enqueued
    entry_id: str


@dataclass(frozen=True, slots=True)
class Held:
    """An entry a consumer holds, with its task: what a graceful shutdown hands back."""

    entry_id: str
    task_id: str


class BeginItem(NamedTuple):
    entry_id: str
    task_id: str
    attempt: int
    # The ``started`` audit event (None: none), without its delivery count: the bus adds
    # the count as it counts the delivery.
    started: AuditEvent | None = None


class Begun(NamedTuple):
    status: Outcome
    deliveries: int
    # The task has step records (worker/steps.py): an earlier delivery recorded some. A
    # delivery of a task without any need not read them.
    stepped: bool = False
    # A task begun before (a redelivery, a retry, a resume): when it first began (ms), and
    # what its earlier deliveries spent on model calls outside recorded steps. 0 otherwise.
    first_ms: int = 0
    spent_tokens: int = 0
    spent_cost_usd: float = 0.0


class CommitItem(NamedTuple):
    entry_id: str
    task_id: str
    result_json: bytes
    reply: str = ""
    events: Sequence[AuditEvent] = ()


@dataclass(frozen=True, slots=True)
class DeadLetter:
    entry_id: str
    reason: str
    error: str
    task_id: str | None = None  # None: the entry could not be decoded
    result_json: bytes = b""
    reply: str = ""
    events: Sequence[AuditEvent] = ()
    check_owner: bool = True
    # task_id was read from an entry that did not decode: its hash is updated only if it
    # names this entry (a bogus entry must not end another task); otherwise these events
    # (naming no task) are recorded instead of ``events``
    salvaged: bool = False
    unbound_events: Sequence[AuditEvent] = ()


@dataclass(frozen=True, slots=True)
class Reschedule:
    entry_id: str
    task_id: str
    due_ms: int
    tier: str
    task_json: bytes
    attempt: int
    reply: str = ""
    events: Sequence[AuditEvent] = ()
    # False: this delivery is given back (the task hash's count goes down by one), so a
    # task that only waits (an open circuit) never nears max_deliveries.
    counted: bool = True
    # What this delivery spent on model calls outside recorded steps (a recorded step's
    # usage is in its record): the next delivery's Result counts it.
    spent_tokens: int = 0
    spent_cost_usd: float = 0.0


class StepRecord(NamedTuple):
    """Fields of a running task's step records (``step:<id>``, ``state``, ...) to set in
    one owner-checked write, with the audit events that go with them."""

    entry_id: str
    task_id: str
    fields: Sequence[tuple[str, bytes]]
    events: Sequence[AuditEvent] = ()


class Promoted(NamedTuple):
    moved: int  # into their tier streams
    dead_lettered: int  # members that were not delayed tasks (decode_error)
    # task ids whose wait for a reply is due (left in the set: ``wake`` takes each out)
    waits: tuple[str, ...] = ()
    # (task id, error) of the dead-lettered members whose task could still be read: each
    # stays 'retrying' until ``end_damaged`` ends it
    damaged: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Park:
    """A delivery that asked a person a question: the task waits, holding no entry."""

    entry_id: str
    task_id: str
    task_json: bytes
    tier: str
    ask: str  # the question's name within the task ("1", "2", ...)
    question: str
    schema_json: bytes  # the answer's JSON Schema
    on_timeout: str
    default_json: bytes  # b"": no default
    due_ms: int  # the wait's deadline: min(timeout, the task's deadline)
    events: Sequence[AuditEvent] = ()


class WaitMode(StrEnum):
    """When a parent waiting for its children is woken."""

    ALL = "all"  # when the last child it awaits has ended
    ANY = "any"  # when one has (a fan-out with a limit submits the next ones)


class ParkStatus(StrEnum):
    """What ``park_children`` did."""

    OK = "ok"  # waiting, holding no entry
    READY = "ready"  # a child it awaits had ended: re-enqueued at once
    DUP = "dup"  # the task was already done
    LOST = "lost"  # another consumer owns the entry


class ChildEnded(StrEnum):
    """What ``child_ended`` did with a child's end on its parent's slot."""

    WOKE = "woke"  # recorded, and the parent re-enqueued (it waited for this one)
    RECORDED = "recorded"  # recorded; the parent is not woken yet (or is running)
    DUP = "dup"  # recorded before: nothing changed
    ENDED = "ended"  # the parent is over (done, cancelled, dead): nothing recorded
    MISSING = "missing"  # no such parent (expired)


@dataclass(frozen=True, slots=True)
class ChildWait:
    """A delivery that delegated to child tasks: the parent waits for ``awaiting``."""

    entry_id: str
    task_id: str
    task_json: bytes
    tier: str
    mode: WaitMode
    children: tuple[str, ...]  # every child delegated so far (listed on the task)
    awaiting: tuple[str, ...]  # the unfinished ones it waits for
    sweep_ms: int  # how often the delayed pump checks the children (from the park on)
    deadline_ms: int  # the task's own deadline (0: none): the wait ends there
    events: Sequence[AuditEvent] = ()


class Answered(NamedTuple):
    """What the reply script did; ``state`` is the task's state then ('' when there is no
    such task), ``asked_ms`` when it asked."""

    status: AnswerStatus
    state: TaskState | str = ""
    asked_ms: int = 0


class Woken(NamedTuple):
    """What the wake script did; with ``WakeStatus.SWEEP``, ``children`` are the ones the
    task awaits, to check."""

    status: WakeStatus
    asked_ms: int = 0
    children: tuple[str, ...] = ()


class AskRecord(NamedTuple):
    """A question's record in the task's steps hash: its answer (JSON) once someone
    answered, and how many times its wait timed out."""

    answer_json: bytes | None
    timeouts: int


@dataclass(frozen=True, slots=True)
class Waiting:
    """One open question, for listings."""

    task_id: str
    agent: str
    shard: int
    asked_ms: int
    ask: str
    question: str
    due_ms: int
    on_timeout: str


@dataclass(frozen=True, slots=True)
class WaitingCursor:
    """A place in a waiting index's order (asked at, then task id): a page of a listing
    starts after it, so a question asked meanwhile never shifts the pages as an offset
    would."""

    asked_ms: int
    task_id: str


class Moved(NamedTuple):
    entries: int  # unstarted entries moved to the target stream
    delayed: int  # delayed retries moved to the target's delayed set


@dataclass(slots=True)
class StreamStats:
    stream: str
    length: int = 0
    pending: int = 0
    consumers: int = 0
    oldest_pending_ms: int = 0
    lag: int | None = None
    dead_letters: int = 0
    delayed: int = 0
    # A fair tier's tasks still in its fair queue or, with a per-key cap, held for a slot
    # (not in the stream's length yet).
    fair: int = 0


class ReplyListener(Protocol):
    """One submitter's reply channel: ``open()`` subscribes (before anything is submitted,
    so no reply is missed), ``run()`` hands each reply to its callback until cancelled,
    ``aclose()`` ends it. Fire and forget: waiters also poll the task's stored result."""

    channel: str

    async def open(self) -> None: ...

    async def run(self) -> None: ...

    async def aclose(self) -> None: ...


class TaskQueue(Protocol):
    """Tasks in tier streams, each delivered to one consumer of the agent's group at a
    time: enqueue, read, reclaim, begin, commit, retry (``reschedule``), dead letter,
    heartbeat (``touch``), hand back; and the delayed set's pump (``promote_due``)."""

    async def ensure_group(self, stream: StreamRef, group: str) -> None: ...

    async def enqueue(
        self,
        stream: StreamRef,
        task_id: str,
        task_json: bytes,
        *,
        reply: str,
        max_backlog: int,
        events: Sequence[AuditEvent] = (),
    ) -> Admitted: ...

    async def enqueue_many(
        self,
        items: Sequence[Enqueue],
        *,
        max_backlog: int | Sequence[int],
        locations: Sequence[tuple[str, str]] = (),
        location_ttl_s: int = 0,
        due_ms: Sequence[int] = (),
        fair: Sequence[Fairness | None] = (),
    ) -> list[Admitted]:
        """``due_ms``: none, or one per item: 0 enqueues it now; a later time (ms since the
        epoch) holds it in its shard's delayed set, state ``scheduled``, until the delayed
        pump moves it to its tier (its entry id is '' until then). A bus built to wait for
        replicas raises ``NotReplicated`` when fewer confirm the batch in time.

        ``fair``: none, or one per item: None enqueues it in order; a ``Fairness`` puts it
        in its tier stream's fair queue (state ``queued``, entry id '') unless the stream
        has nothing unread and the fair queue is empty (then straight in, so a reader
        blocked on the stream wakes). ``read_fair`` moves it to the stream in its turn."""
        ...

    async def read(
        self, stream: StreamRef, group: str, consumer: str, count: int, block_ms: int | None
    ) -> list[RawEntry]: ...

    async def read_fair(
        self,
        stream: StreamRef,
        group: str,
        consumer: str,
        count: int,
        block_ms: int | None,
        *,
        cap: int = 0,
    ) -> list[RawEntry]:
        """As ``read``, first moving up to ``count`` tasks of the stream's fair queue into
        the stream, lowest virtual finish time first (weighted fair queueing over fairness
        keys), in the same step on the server. ``cap`` (the tier's ``max_running_per_key``,
        0: none): a key whose tasks moved in and not ended yet (pending in the group, or
        unread) number ``cap`` gets none moved in; its turns wait, in order, until one ends."""
        ...

    async def read_own_pending(
        self, stream: StreamRef, group: str, consumer: str, count: int, after: str
    ) -> list[RawEntry]: ...

    async def claim_stale(
        self,
        stream: StreamRef,
        group: str,
        consumer: str,
        min_idle_ms: int,
        count: int,
        cursor: ReclaimCursor,
    ) -> Claimed: ...

    async def begin(
        self,
        stream: StreamRef,
        group: str,
        consumer: str,
        items: Sequence[BeginItem],
        *,
        fresh: bool = False,
    ) -> list[Begun]: ...

    async def commit(
        self, stream: StreamRef, group: str, consumer: str, items: Sequence[CommitItem]
    ) -> list[Outcome]: ...

    async def commit_streams(
        self, group: str, consumer: str, batches: Sequence[tuple[StreamRef, Sequence[CommitItem]]]
    ) -> list[list[Outcome]]: ...

    async def reschedule(
        self, stream: StreamRef, group: str, consumer: str, item: Reschedule
    ) -> Outcome: ...

    async def dead_letter(
        self, stream: StreamRef, group: str, consumer: str, item: DeadLetter
    ) -> Outcome: ...

    async def touch(
        self, stream: StreamRef, group: str, consumer: str, entry_ids: Sequence[str]
    ) -> list[str]: ...

    async def deliveries(self, stream: StreamRef, task_ids: Sequence[str]) -> list[int]: ...

    async def cancelled(self, stream: StreamRef, task_ids: Sequence[str]) -> list[str]:
        """Which of these tasks were cancelled (``cancel``): the heartbeat's check of the
        running ones, for a cancel whose message on the cancel channel was lost."""
        ...

    async def hand_back(
        self,
        stream: StreamRef,
        group: str,
        consumer: str,
        items: Sequence[Held],
        idle_ms: int,
    ) -> list[str]: ...

    async def prune_consumers(
        self, stream: StreamRef, group: str, consumer: str, min_idle_ms: int
    ) -> list[str]: ...

    async def expose(self, stream: StreamRef, group: str, dead: str, idle_ms: int) -> int:
        """The entries a dead consumer holds become claimable at once (``claim_stale`` with
        ``min_idle_ms`` up to ``idle_ms`` takes them): their idle time set to ``idle_ms``,
        their owner and delivery count unchanged. How many there were."""
        ...

    async def promote_due(
        self, keys: ShardKeys, tiers: Sequence[str], limit: int = 500
    ) -> Promoted: ...

    async def end_damaged(
        self, keys: ShardKeys, task_id: str, result_json: bytes, events: Sequence[AuditEvent]
    ) -> Cancelled | TaskState:
        """End dead, with ``result_json``, a task whose delayed-set member was damaged
        (``Promoted.damaged``), while it is still retrying or scheduled: ok, missing, or the
        state that left it alone. Its submitter is answered."""
        ...


class Records(Protocol):
    """Small records kept beside the tasks (location, idempotency and owner records)."""

    async def set_many(self, pairs: Sequence[tuple[str, str]], ttl_s: int, *, what: str) -> int:
        """Write each (key, value) for ``ttl_s``; returns the fewest replicas any node
        confirmed them to (0 for a bus that does not wait for replicas)."""
        ...


class Replies(Protocol):
    """Results pushed to the submitter that waits for them."""

    def reply_listener(self, channel: str, deliver: Callable[[bytes], None]) -> ReplyListener: ...


class HumanWaits(Protocol):
    """Tasks waiting for a person's reply (worker/asking.py, the orchestrator's replies):
    park, answer, wake (its timeout), and the listings of open questions."""

    async def park(self, stream: StreamRef, group: str, consumer: str, item: Park) -> Outcome: ...

    async def answer(
        self,
        keys: ShardKeys,
        tiers: Sequence[str],
        task_id: str,
        ask: str,
        answer_json: bytes,
        events: Sequence[AuditEvent],
    ) -> Answered: ...

    async def wake(
        self, keys: ShardKeys, tiers: Sequence[str], task_id: str, events: Sequence[AuditEvent]
    ) -> Woken: ...

    async def ask_record(self, keys: ShardKeys, task_id: str, ask: str) -> AskRecord: ...

    async def waiting(
        self, keys: ShardKeys, limit: int, tenant: str | None = None
    ) -> list[Waiting]:
        """The shard's oldest ``limit`` open questions, oldest first; with ``tenant``, that
        tenant's alone (read from its own index: others' questions cost it nothing)."""
        ...

    async def waiting_ids(
        self,
        keys: ShardKeys,
        limit: int,
        tenant: str | None = None,
        *,
        after: WaitingCursor | None = None,
        newest: bool = False,
    ) -> list[tuple[str, float]]:
        """``waiting``'s (task id, asked at ms) pairs alone, without reading the questions:
        a listing over several shards keeps the oldest of them all, then reads only those
        (``waiting_of``). With ``after``, those past that place; ``newest`` lists newest
        first."""
        ...

    async def waiting_of(self, keys: ShardKeys, ids: Sequence[tuple[str, float]]) -> list[Waiting]:
        """The open questions of these (task id, asked at) pairs of the shard, in their
        order; a task that stopped waiting meanwhile is left out."""
        ...

    async def asked(self, keys: ShardKeys, task_id: str) -> dict[str, str]:
        """A waiting task's question: ``question``, ``ask_schema``, ``ask_default`` (JSON
        text); {} unless it waits."""
        ...

    async def waiting_count(
        self, shards: Sequence[ShardKeys], tenant: str | None = None
    ) -> list[int]:
        """Per shard, its open questions; with ``tenant``, the size of that tenant's index
        (which may still hold the odd question answered since a park or listing passed)."""
        ...


class ChildWaits(Protocol):
    """Parents waiting for their child tasks (worker/delegation.py)."""

    async def park_children(
        self, stream: StreamRef, group: str, consumer: str, item: ChildWait
    ) -> ParkStatus:
        """Owner-checked: ack the entry and make the task wait for ``item.awaiting``, or
        re-enqueue it on its tier at once when one it awaits (mode any) or all of them
        (mode all) ended already."""
        ...

    async def child_ended(
        self,
        keys: ShardKeys,
        tiers: Sequence[str],
        parent_id: str,
        child_id: str,
        result_json: bytes,
        events: Sequence[AuditEvent],
    ) -> ChildEnded:
        """On the parent's shard: record the child's result once, and wake the parent
        when it waited for this child and its wait is over."""
        ...

    async def child_results(
        self, keys: ShardKeys, task_id: str, child_ids: Sequence[str]
    ) -> dict[str, bytes]:
        """The recorded results (JSON) of those of the task's children that ended."""
        ...

    async def link_child(self, keys: ShardKeys, child_id: str, parent_id: str, depth: int) -> bool:
        """Name the parent on the child's task hash while it exists (for listings)."""
        ...


class StepLog(Protocol):
    """A running task's durable step records (worker/steps.py)."""

    async def record_steps(
        self, group: str, consumer: str, items: Sequence[tuple[StreamRef, StepRecord]]
    ) -> list[Outcome]:
        """Per item, set its fields in the task's steps hash if this consumer still owns the
        entry and the task has no terminal result: ok | lost | dup. Each item is its own
        owner-checked script; the batch is one round trip."""
        ...

    async def load_steps(self, keys: ShardKeys, task_id: str) -> dict[str, bytes]:
        """Every field of the task's steps hash ({} when none)."""
        ...


class Admin(Protocol):
    """Operators' changes: replay a dead letter, cancel a task, move a version's unstarted
    tasks (a rollback)."""

    async def replay(
        self, keys: ShardKeys, dlq_entry: str, tier: str, task_id: str, task_json: bytes, reply: str
    ) -> tuple[Replayed, str]: ...

    async def cancel(
        self,
        keys: ShardKeys,
        task_id: str,
        result_json: bytes,
        events: Sequence[AuditEvent],
        *,
        running: bool = False,
        notify: str = "",
    ) -> Cancelled | TaskState:
        """Answer a queued, scheduled, retrying or waiting task (``running``: a running one
        too) with ``result_json``: ok, missing, or the state that prevented it. A running
        task's id is published on ``notify`` (its agent's cancel channel), so its worker
        stops it; its commit then finds it done and acks its entry as a duplicate."""
        ...

    async def move_unstarted(
        self, source: StreamRef, target: StreamRef, group: str, *, limit: int = 500
    ) -> Moved:
        """Move every entry of ``source`` no consumer of ``group`` has been given to
        ``target`` (same shard, another version), and ``source``'s delayed retries to
        ``target``'s delayed set: each exactly once, in scripts on the shard's slot."""
        ...


class Inspection(Protocol):
    """Read-only views: the server's fitness, round trip, and backlogs."""

    async def check_server(self) -> str:
        """Refuse a server this protocol cannot run on (too old, or evicting keys unless the
        bus was built to allow it); its version."""
        ...

    async def ping_ms(self, limit_s: float = 2.0) -> float | None: ...

    async def stream_stats(self, stream: StreamRef, group: str) -> StreamStats: ...

    async def shard_backlog(self, keys: ShardKeys) -> tuple[int, int]: ...

    async def oldest_idle_ms(
        self, streams: Sequence[tuple[str, str]], scan: int
    ) -> list[int | None]: ...

    async def outbox_lengths(self, shards: Sequence[ShardKeys]) -> list[int]: ...


PROTOCOLS: tuple[type, ...] = (
    TaskQueue,
    Records,
    Replies,
    HumanWaits,
    ChildWaits,
    StepLog,
    Admin,
    Inspection,
)


class MessageBus(
    TaskQueue, Records, Replies, HumanWaits, ChildWaits, StepLog, Admin, Inspection, Protocol
):
    """The whole bus: the narrow protocols (``TaskQueue``, ``Records``, ``Replies``,
    ``HumanWaits``, ``ChildWaits``, ``StepLog``, ``Admin``, ``Inspection``) in one object,
    for the wiring; a caller that needs one part takes that protocol. One instance serves
    one process; ``aclose()`` closes the connections the bus opened itself."""

    async def aclose(self) -> None: ...
